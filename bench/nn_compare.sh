#!/usr/bin/env bash
# nn_compare.sh — the network engine alone (no data loading, plain SGD) against PyTorch CPU,
# interleaved in one run: LeNet and MLP training steps at batch 64 and ResNet-18
# forward+backward at 224x224 batch 16, 1 and 2 threads, plus the sgemm peak.
#   bench/nn_compare.sh            # BUILD=build REPS=3; about 4 minutes on 2 cores
# Each shoal figure is bench/nn_step.c's median of 5 rounds; each torch figure
# bench/torch_step.py's (bench/torch_resnet18.py for ResNet-18); the table shows the median
# over REPS repetitions. The whole-trainer comparison is bench/engine/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
REPS=${REPS:-3}
. bench/peers.sh # PY, and the peers' BLAS kernels (OPENBLAS_CORETYPE)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s -j2 BUILD="$BUILD" "$BUILD/libshoal.a" >&2
cc -std=c11 -D_GNU_SOURCE -O3 -march=native -Iinclude -Isrc bench/nn_step.c "$BUILD/libshoal.a" \
   -o "$tmp/nn_step" -pthread -lcrypto -ljpeg -lpng -lz -ldl -lm -lrt -lprotobuf-c
cc -O3 -march=native bench/gemm_peak.c -o "$tmp/gemm_peak" -ldl
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
for rep in $(seq "$REPS"); do
    for th in 1 2; do
        for m in lenet mlp; do
            steps=20; [ $m = mlp ] && steps=50
            "$tmp/nn_step" examples/$m.cfg 64 $th 5 $steps | head -1 |
                sed -E 's/.*: ([0-9.]+) images\/s.*/\1/' >>"$tmp/shoal.$m.$th"
            OPENBLAS_NUM_THREADS=1 $PY bench/torch_step.py $m 64 $th 5 $steps |
                sed -E 's/.*: ([0-9.]+) images\/s.*/\1/' >>"$tmp/torch.$m.$th"
        done
        "$tmp/nn_step" examples/resnet18.cfg 16 $th 3 1 | head -1 |
            sed -E 's/.* ([0-9.]+) ms per step.*/\1/' >>"$tmp/shoal.resnet18.$th"
        OPENBLAS_NUM_THREADS=1 $PY bench/torch_resnet18.py $th 3 |
            sed -E 's/.*forward\+backward ([0-9.]+) ms.*/\1/' >>"$tmp/torch.resnet18.$th"
    done
done
"$tmp/gemm_peak" | tail -1
printf '%-28s %7s %12s %12s %8s\n' model threads shoal torch ratio
for th in 1 2; do
    for m in lenet mlp; do
        s=$(median <"$tmp/shoal.$m.$th"); t=$(median <"$tmp/torch.$m.$th")
        printf '%-28s %7s %12s %12s %7.2fx\n' "$m images/s" $th "$s" "$t" "$(echo "$s / $t" | bc -l)"
    done
    s=$(median <"$tmp/shoal.resnet18.$th"); t=$(median <"$tmp/torch.resnet18.$th")
    printf '%-28s %7s %12s %12s %7.2fx\n' "resnet18 ms fwd+bwd" $th "$s" "$t" "$(echo "$t / $s" | bc -l)"
done
echo "ratio: shoal speed over torch (> 1: shoal faster); load average $(cut -d' ' -f1-3 /proc/loadavg)"
