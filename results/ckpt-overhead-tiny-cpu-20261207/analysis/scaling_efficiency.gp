set terminal svg size 900,500 dynamic font 'sans,11'
set output 'scaling_efficiency.svg'
set title 'Scaling efficiency vs CPU ranks (bars: repeats'' min-max)'
set grid
set logscale x 2
set xlabel 'CPU ranks'
set key outside bottom center vertical maxrows 4 font ',9'
set bmargin 9
set label 10 'bars: min-max over repeats or p10-p90 over steady-state steps, the wider' at screen 0.01, screen 0.02 font ',8'
set ylabel 'efficiency'
set yrange [0:1.15]
plot 'scaling_efficiency.dat' index 0 u 1:8:9:10 w yerrorlines pt 7 lc rgb '#1f77b4' t 'tiny, tp1 pp1 cp1 ZeRO0 act none mb4 fp32 (weak)', \
  1 w l dt 2 lc rgb 'black' t 'ideal'
