# Pod startup latency distributions (CDF) per pod count: nodelet (solid) vs the same pods
# created directly through CRI (dashed). Called by bench/run with
#   -e "datadir='DIR'; sizes='1 30 100'; outfile='FILE.png'"
set terminal pngcairo size 900,540 noenhanced font ",10"
set output outfile
set title "Pod startup: manifest written -> Running (nodelet) vs the CRI floor"
set xlabel "ms since the manifests were written (log scale)"
set logscale x
set ylabel "fraction of pods Running"
set yrange [0:1.05]
set grid
set key bottom right
plot for [i=1:words(sizes)] sprintf("%s/startup-%s-nodelet.dat", datadir, word(sizes, i)) \
       using 1:2 with linespoints lw 2 pt 7 ps 0.5 lc i title sprintf("nodelet, %s pod(s)", word(sizes, i)), \
     for [i=1:words(sizes)] sprintf("%s/startup-%s-floor.dat", datadir, word(sizes, i)) \
       using 1:2 with linespoints lw 2 dt 2 pt 6 ps 0.5 lc i title sprintf("CRI floor, %s pod(s)", word(sizes, i))
