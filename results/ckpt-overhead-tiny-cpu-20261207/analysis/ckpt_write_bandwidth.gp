set terminal svg size 900,500 dynamic font 'sans,11'
set output 'ckpt_write_bandwidth.svg'
set title 'Aggregate checkpoint write bandwidth vs ranks'
set grid
set logscale x 2
set xlabel 'ranks'
set ylabel 'MB/s (bytes of every rank / the slowest write)'
set yrange [0:*]
set key bottom right
plot 'ckpt_write_bandwidth.dat' index 0 u 1:2 w lp pt 7 t 'async (median over intervals and repeats)', \
  'ckpt_write_bandwidth.dat' index 1 u 1:2 w lp pt 7 t 'sync (median over intervals and repeats)', \
  53.5648 w l dt 2 lc rgb 'black' t 'storage limit: sequential write of 2.09715 MB (dd if=/dev/zero bs=1M conv=fsync)'
