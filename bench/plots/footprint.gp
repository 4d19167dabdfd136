# Footprint over time: PSS of each nodelet process (stacked lines) and all processes' CPU
# (right axis), while the pod count goes 0 -> 10 -> 100. Called by bench/run with
#   -e "datafile='footprint.dat'; ncols=N; outfile='FILE.png'"
set terminal pngcairo size 900,540 noenhanced font ",10"
set output outfile
set title "nodelet footprint over time, while the pods are added (see latest.md for the phases)"
set xlabel "seconds"
set ylabel "PSS, MiB"
set y2label "CPU, cores (all nodelet processes)"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set grid
set key top left
set key autotitle columnhead
plot datafile using 1:3 with lines lw 3 lc rgb "black" title "PSS, sum", \
     for [i=6:ncols] datafile using 1:i with lines lw 1.5 title columnheader(i), \
     datafile using 1:5 axes x1y2 with lines lw 1 dt 3 lc rgb "red" title "CPU (right axis)"
