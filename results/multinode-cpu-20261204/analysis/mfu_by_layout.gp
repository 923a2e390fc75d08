set terminal svg size 900,500 dynamic font 'sans,11'
set output 'mfu_by_layout.svg'
set title 'MFU per layout (bars: min-max over repeats) and memory headroom'
set grid
set style fill solid 0.6 border -1
set boxwidth 0.2 absolute
set yrange [0:*]
set y2range [0:*]
set lmargin 16
set bmargin 8
set ylabel 'MFU (%)'
set y2label 'GiB per device (peak: max over ranks; capacity: run.json)'
set ytics nomirror
set y2tics
set xtics rotate by 30 right noenhanced
set key outside right top
set label 10 'at one peak for every run, 123.249 GFLOP/s per rank (measured once, at the smallest size)' at screen 0.01, screen 0.02 font ',8'
plot 'mfu_by_layout.dat' u ($0-0.2):2:3:4:(0.4):xtic(1) w boxerrorbars lc rgb '#1f77b4' t 'MFU', '' u ($0+0.1):5 w boxes axes x1y2 lc rgb '#ff7f0e' t 'peak memory', '' u ($0+0.3):($7>=0?$7:1/0) w boxes axes x1y2 lc rgb '#2ca02c' t 'headroom (capacity - peak)', '' u ($0+0.3):($7<0?-$7:1/0) w boxes axes x1y2 lc rgb '#d62728' t 'over capacity (peak - capacity)'
