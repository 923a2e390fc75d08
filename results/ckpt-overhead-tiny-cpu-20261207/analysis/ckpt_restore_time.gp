set terminal svg size 900,500 dynamic font 'sans,11'
set output 'ckpt_restore_time.svg'
set title 'Restore time (load at resume, slowest rank) per size'
set grid
set logscale x 2
set xlabel 'ranks'
set ylabel 'seconds'
set yrange [0:*]
set key top left
plot 'ckpt_restore_time.dat' u 1:2:3:4 w yerrorlines pt 7 t 'restore (bars: min-max over repeats)'
