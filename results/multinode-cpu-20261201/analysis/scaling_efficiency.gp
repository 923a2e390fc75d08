set terminal svg size 900,500 dynamic font 'sans,11'
set output 'scaling_efficiency.svg'
set title 'Scaling efficiency vs CPU ranks'
set grid
set logscale x 2
set xlabel 'CPU ranks'
set key bottom left
set ylabel 'efficiency'
set yrange [0:1.1]
plot 'scaling_efficiency.dat' index 0 u 2:5 w lp pt 7 t 'default (weak)'
