set terminal svg size 900,500 dynamic font 'sans,11'
set output 'step_timeline.svg'
set title 'Step time (slowest rank); checkpoint steps marked; window shaded'
set grid
set xlabel 'step'
set ylabel 'seconds'
set key top left
set object 1 rect from 29, graph 0 to 29, graph 1 fc rgb '#e8f0ff' fs solid 0.5 noborder behind
plot 'step_timeline.dat' u 1:2 w l lc rgb '#1f77b4' t 'step time (max over ranks)', \
  '' u 1:($6>0?$2:1/0) w p pt 7 ps 0.6 lc rgb '#d62728' t 'checkpoint step', \
  '' u 1:($4>0?$4:1/0) w impulses lc rgb '#ff7f0e' t 'ckpt stall', \
  0.930825 w l dt 2 lc rgb 'black' t 'window median'
