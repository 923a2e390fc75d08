set terminal svg size 900,500 dynamic font 'sans,11'
set output 'mfu_vs_gpus.svg'
set title 'MFU vs CPU ranks'
set grid
set logscale x 2
set xlabel 'CPU ranks'
set key bottom left
set ylabel 'MFU (%)'
set yrange [0:*]
plot 'mfu_vs_gpus.dat' index 0 u 2:4 w lp pt 7 t 'default (weak)'
