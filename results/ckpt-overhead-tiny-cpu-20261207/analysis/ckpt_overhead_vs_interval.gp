set terminal svg size 900,500 dynamic font 'sans,11'
set output 'ckpt_overhead_vs_interval.svg'
set title 'Checkpoint overhead vs interval per mode (stall + background interference, share of step time; bars: min-max over repeats)'
set grid
set logscale x 2
set xlabel 'checkpoint interval (steps)'
set ylabel 'overhead (% of step time)'
set yrange [0:*]
set key top right
plot 'ckpt_overhead_vs_interval.dat' index 0 u 1:2:3:4 w yerrorlines pt 5 dt 2 t 'async, 1 rank(s)', \
  'ckpt_overhead_vs_interval.dat' index 1 u 1:2:3:4 w yerrorlines pt 7 dt 1 t 'sync, 1 rank(s)', \
  'ckpt_overhead_vs_interval.dat' index 2 u 1:2:3:4 w yerrorlines pt 5 dt 2 t 'async, 2 rank(s)', \
  'ckpt_overhead_vs_interval.dat' index 3 u 1:2:3:4 w yerrorlines pt 7 dt 1 t 'sync, 2 rank(s)'
