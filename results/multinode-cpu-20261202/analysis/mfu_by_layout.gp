set terminal svg size 900,500 dynamic font 'sans,11'
set output 'mfu_by_layout.svg'
set title 'MFU per layout (bars: min-max over repeats) and peak memory'
set grid
set style fill solid 0.6 border -1
set boxwidth 0.4 absolute
set yrange [0:*]
set y2range [0:*]
set ylabel 'MFU (%)'
set y2label 'peak memory (GiB, max over ranks)'
set ytics nomirror
set y2tics
set xtics rotate by 30 right noenhanced
set key outside right top
set label 10 'at one peak for every run, 97.2888 GFLOP/s per rank (measured once, at the smallest size)' at screen 0.01, screen 0.02 font ',8'
plot 'mfu_by_layout.dat' u ($0-0.2):2:3:4:(0.4):xtic(1) w boxerrorbars lc rgb '#1f77b4' t 'MFU', '' u ($0+0.2):5 w boxes axes x1y2 lc rgb '#ff7f0e' t 'peak memory'
