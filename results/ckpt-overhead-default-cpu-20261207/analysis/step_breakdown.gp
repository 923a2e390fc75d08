set terminal svg size 900,500 dynamic font 'sans,11'
set output 'step_breakdown.svg'
set title 'Median step in parts per point'
set grid
set label 1 'checkpoint stall: per step on average; exposed communication split by the host waits of each part (comm_wait_s)' at screen 0.01, screen 0.02 font ',8' noenhanced
set bmargin 7
set style data histograms
set style histogram rowstacked
set style fill solid 0.8 border -1
set boxwidth 0.7
set ylabel 'seconds per step'
set yrange [0:*]
set xtics rotate by 45 right noenhanced font ',9'
set key outside right top
plot 'step_breakdown.dat' u 2:xtic(1) t 'compute' lc rgb '#1f77b4', \
  '' u 3 t 'exposed tp' lc rgb '#d62728', '' u 4 t 'exposed cp' lc rgb '#e377c2', \
  '' u 5 t 'exposed pp' lc rgb '#9467bd', '' u 6 t 'exposed dp' lc rgb '#8c564b', \
  '' u 7 t 'exposed ZeRO' lc rgb '#17becf', '' u 8 t 'exposed host reductions' lc rgb '#bcbd22', \
  '' u 9 t 'exposed, unattributed' lc rgb '#7f7f7f', '' u 10 t 'data' lc rgb '#2ca02c', \
  '' u 11 t 'checkpoint stall' lc rgb '#ff7f0e', '' u 12 t 'other (bubble, waits)' lc rgb '#dddddd'
