set terminal svg size 900,500 dynamic font 'sans,11'
set output 'rank_skew.svg'
set title 'Per-rank busy time (step - exposed comm) over the window'
set grid
set xlabel 'rank'
set ylabel 'seconds'
set boxwidth 0.6 absolute
set style fill solid 0.25 border
set xrange [-0.5:1.500000]
set xtics 1
set key top right
plot 'rank_skew.dat' u 1:3:2:6:5 w candlesticks whiskerbars lc rgb '#1f77b4' t 'min/p25/p75/max', \
  '' u 1:4:4:4:4 w candlesticks lc rgb 'black' t 'median'
