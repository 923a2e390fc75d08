set terminal svg size 900,500 dynamic font 'sans,11'
set output 'tok_s_gpu_vs_gpus.svg'
set title 'Tokens/s per device vs CPU ranks'
set grid
set logscale x 2
set xlabel 'CPU ranks'
set key outside bottom center vertical maxrows 4 font ',9'
set bmargin 9
set label 10 'bars: min-max over repeats or p10-p90 over steady-state steps, the wider' at screen 0.01, screen 0.02 font ',8'
set ylabel 'tokens/s per device'
set yrange [0:*]
plot 'tok_s_gpu_vs_gpus.dat' index 0 u 1:2:3:4 w yerrorlines pt 7 lc rgb '#1f77b4' t 'tiny, tp1 pp1 cp1 ZeRO0 act none mb4 fp32 (weak)', \
  73019.9 w l dt 2 lc rgb '#1f77b4' t 'ideal (1-rank value held)', \
  'tok_s_gpu_vs_gpus.dat' index 0 u 1:($11>0?$11:1/0) w lp dt 3 pt 6 lc rgb '#1f77b4' t 'planner prediction (configs/clusters/cpu-local.yaml)'
