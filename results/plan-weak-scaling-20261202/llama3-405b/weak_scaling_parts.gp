set terminal svg size 900,500 dynamic font 'sans,11'
set output 'weak_scaling_parts.svg'
set title 'Predicted step parts per scale (stacked)'
set grid
set xlabel 'devices'
set ylabel 'ms per step (cumulative)'
set logscale x 2
set yrange [0:*]
set key outside right
plot 'weak_scaling_parts.dat' u 1:($2) w lp t 'compute', \
  'weak_scaling_parts.dat' u 1:($2+$3) w lp t '+ bubble', \
  'weak_scaling_parts.dat' u 1:($2+$3+$4) w lp t '+ imbalance', \
  'weak_scaling_parts.dat' u 1:($2+$3+$4+$5) w lp t '+ tp', \
  'weak_scaling_parts.dat' u 1:($2+$3+$4+$5+$6) w lp t '+ cp', \
  'weak_scaling_parts.dat' u 1:($2+$3+$4+$5+$6+$7) w lp t '+ pp', \
  'weak_scaling_parts.dat' u 1:($2+$3+$4+$5+$6+$7+$8) w lp t '+ dp', \
  'weak_scaling_parts.dat' u 1:($2+$3+$4+$5+$6+$7+$8+$9) w lp t '+ zero', \
  'weak_scaling_parts.dat' u 1:($2+$3+$4+$5+$6+$7+$8+$9+$10) w lp t '+ other', \
  'weak_scaling_parts.dat' u 1:($2+$3+$4+$5+$6+$7+$8+$9+$10+$11) w lp t '+ optimizer'
