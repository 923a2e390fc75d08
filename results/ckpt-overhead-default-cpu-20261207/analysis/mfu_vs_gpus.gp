set terminal svg size 900,500 dynamic font 'sans,11'
set output 'mfu_vs_gpus.svg'
set title 'MFU vs CPU ranks at one peak for every run, 98.5035 GFLOP/s per rank (measured once, at the smallest size)'
set grid
set logscale x 2
set xlabel 'CPU ranks'
set key outside bottom center vertical maxrows 4 font ',9'
set bmargin 9
set label 10 'bars: min-max over repeats or p10-p90 over steady-state steps, the wider' at screen 0.01, screen 0.02 font ',8'
set ylabel 'MFU (%)'
set yrange [0:*]
plot 'mfu_vs_gpus.dat' index 0 u 1:5:6:7 w yerrorlines pt 7 lc rgb '#1f77b4' t 'default, tp1 pp1 cp1 ZeRO0 act none mb2 fp32 (single)', \
  48.4382 w l dt 2 lc rgb '#1f77b4' t 'ideal (2-rank value held)', \
  'mfu_vs_gpus.dat' index 0 u 1:($12>0?$12:1/0) w lp dt 3 pt 6 lc rgb '#1f77b4' t 'planner prediction (configs/clusters/cpu-local.yaml)'
