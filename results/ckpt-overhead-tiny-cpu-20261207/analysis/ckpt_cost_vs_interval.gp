set terminal svg size 900,500 dynamic font 'sans,11'
set output 'ckpt_cost_vs_interval.svg'
set title 'Cost per checkpoint: C, median after each run''s first (solid); first (dashed)'
set grid
set logscale x 2
set xlabel 'checkpoint interval (steps)'
set ylabel 'seconds per checkpoint'
set yrange [0:*]
set key below
plot 'ckpt_cost_vs_interval.dat' index 0 u 1:2 w lp pt 5 lc 1 t 'C (steady), async, 1 rank(s)', \
  'ckpt_cost_vs_interval.dat' index 0 u 1:3 w lp pt 5 dt 2 lc 1 t 'first checkpoint, async, 1 rank(s)', \
  'ckpt_cost_vs_interval.dat' index 1 u 1:2 w lp pt 7 lc 2 t 'C (steady), sync, 1 rank(s)', \
  'ckpt_cost_vs_interval.dat' index 1 u 1:3 w lp pt 7 dt 2 lc 2 t 'first checkpoint, sync, 1 rank(s)', \
  'ckpt_cost_vs_interval.dat' index 2 u 1:2 w lp pt 5 lc 3 t 'C (steady), async, 2 rank(s)', \
  'ckpt_cost_vs_interval.dat' index 2 u 1:3 w lp pt 5 dt 2 lc 3 t 'first checkpoint, async, 2 rank(s)', \
  'ckpt_cost_vs_interval.dat' index 3 u 1:2 w lp pt 7 lc 4 t 'C (steady), sync, 2 rank(s)', \
  'ckpt_cost_vs_interval.dat' index 3 u 1:3 w lp pt 7 dt 2 lc 4 t 'first checkpoint, sync, 2 rank(s)'
