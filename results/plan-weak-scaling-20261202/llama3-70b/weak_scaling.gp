set terminal svg size 900,500 dynamic font 'sans,11'
set output 'weak_scaling.svg'
set title 'Predicted weak scaling: tokens/s per device, efficiency and MFU'
set grid
set xlabel 'devices'
set ylabel 'tokens/s per device'
set y2label 'efficiency, MFU'
set logscale x 2
set yrange [0:*]
set ytics nomirror
set y2tics
set y2range [0:1.1]
set key bottom left
plot 'weak_scaling.dat' u 1:2 w lp pt 7 t 'tokens/s per device', '' u 1:3 axes x1y2 w lp pt 5 t 'efficiency', '' u 1:4 axes x1y2 w lp pt 9 t 'MFU'
