#!/bin/bash
# ten_gbit.sh — shoal's allreduce alone on the emulated cluster at 10 gbit: algbw and the share of
# the link's limit (bench/net/run.sh gives the formula), 2, 3 and 4 hosts x 1 and 2 ranks, 2 runs.
# Needs root; build/shoal built. Results: stdout, one line per run and size.
cd "$(dirname "$0")/../.."
export NETLAB_NAME=ten
L=scripts/netlab.sh
for H in 2 3 4; do
  $L down >/dev/null 2>&1; $L up $H --rate 10gbit >/dev/null || exit 1
  for R in 1 2; do
    for rep in 1 2; do
      for range in "65536 1048576 100" "4194304 16777216 10"; do
        set -- $range
        $L run $R --port $((30000 + RANDOM % 20000)) -- "$PWD/build/shoal" bench allreduce -b $1 -e $2 -f 4 -n $3 -w 3 -c 0 2>/dev/null \
          | awk -v h=$H -v r=$R '/^ +[0-9]/ {lim=1.25e9*h/(2*(h-1)); printf "%dx%d %9d %.3f GB/s %.1f%%\n", h, r, $1, $1/($6*1e-6)/1e9, 100*$1/($6*1e-6)/lim}'
      done
    done
  done
done
$L down >/dev/null 2>&1
