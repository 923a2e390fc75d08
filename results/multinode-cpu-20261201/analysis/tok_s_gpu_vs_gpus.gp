set terminal svg size 900,500 dynamic font 'sans,11'
set output 'tok_s_gpu_vs_gpus.svg'
set title 'Tokens/s per device vs CPU ranks'
set grid
set logscale x 2
set xlabel 'CPU ranks'
set key bottom left
set ylabel 'tokens/s per device'
set yrange [0:*]
plot 'tok_s_gpu_vs_gpus.dat' index 0 u 2:3 w lp pt 7 t 'default (weak)'
