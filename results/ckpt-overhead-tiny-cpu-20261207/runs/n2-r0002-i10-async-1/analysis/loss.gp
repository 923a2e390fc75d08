set terminal svg size 900,500 dynamic font 'sans,11'
set output 'loss.svg'
set title 'Loss: training (every step) and validation (the held-out split)'
set grid
set xlabel 'step'
set ylabel 'loss (nats/token)'
set key top right
plot 'loss.dat' index 0 u 1:2 w l lc rgb '#1f77b4' t 'training'
