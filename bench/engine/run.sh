#!/usr/bin/env bash
# run.sh — the engine benchmark: shoal against PyTorch (CPU) and Darknet, side by side in one
# run, medians of REPS runs each, interleaved so that machine noise hits all of them alike.
#
#   bench/engine/run.sh                 # from the repository root; REPS=3 STEPS=200 WARMUP=20
#
# Measures (batch 64, Fashion-MNIST from $SHOAL_DATA_DIR or /usr/share/datasets/fashion-mnist):
#   1. training throughput, images/s in the steady state (STEPS steps after WARMUP; Darknet
#      DARKNET_STEPS after DARKNET_WARMUP), of
#      examples/lenet.cfg and examples/mlp.cfg with 1 and 2 threads: shoal train --json,
#      torch_peer.py (same model and SGD; OPENBLAS_NUM_THREADS=1, torch.set_num_threads(T)),
#      darknet_train.c (libdarknet's train_network on the same .cfg; Darknet is
#      single-threaded, so its 1-thread figure is used for both rows);
#   2. forward+backward ms of examples/resnet18.cfg at batch 16 (shoal time --json against a
#      hand-written PyTorch ResNet-18), 1 and 2 threads;
#   3. peak RSS of the LeNet 1-thread training runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-3}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}
# Darknet is an order of magnitude slower: fewer batches give the same steady-state figure.
DARKNET_STEPS=${DARKNET_STEPS:-60}
DARKNET_WARMUP=${DARKNET_WARMUP:-5}
BUILD=${BUILD:-build}
DATA=${SHOAL_DATA_DIR:-/usr/share/datasets/fashion-mnist}
. bench/peers.sh # PY, and the peers' BLAS kernels (OPENBLAS_CORETYPE)

make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
SHOAL="$BUILD/shoal"
DARKNET=""
if [ -f /usr/lib/darknet/libdarknet.so ] && [ -f /usr/lib/darknet/include/darknet.h ]; then
    mkdir -p "$BUILD/bench"
    if cc -O2 bench/engine/darknet_train.c -I/usr/lib/darknet/include -L/usr/lib/darknet \
          -ldarknet -Wl,-rpath,/usr/lib/darknet -lz -lm -o "$BUILD/bench/darknet_train" 2>/dev/null; then
        DARKNET="$BUILD/bench/darknet_train"
    fi
fi
[ -z "$DARKNET" ] && echo "darknet: libdarknet not found (apt-get install darknet); its column is left out" >&2

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { $PY -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

for rep in $(seq "$REPS"); do
    for model in lenet mlp; do
        for th in 1 2; do
            echo "rep $rep/$REPS: $model, $th thread(s)" >&2
            "$SHOAL" train "examples/$model.cfg" --data "$DATA" --max-steps $((STEPS + WARMUP)) \
                --threads "$th" --quiet --json >"$tmp/s.json"
            field images_per_s <"$tmp/s.json" >>"$tmp/shoal.$model.$th"
            field peak_rss_mb <"$tmp/s.json" >>"$tmp/shoal_rss.$model.$th"
            OPENBLAS_NUM_THREADS=1 $PY bench/engine/torch_peer.py train --model "$model" --threads "$th" --steps "$STEPS" \
                --warmup "$WARMUP" --data "$DATA" >"$tmp/t.json"
            field images_per_s <"$tmp/t.json" >>"$tmp/torch.$model.$th"
            field peak_rss_mb <"$tmp/t.json" >>"$tmp/torch_rss.$model.$th"
            if [ -n "$DARKNET" ] && [ "$th" = 1 ]; then
                (cd "$tmp" && "$OLDPWD/$DARKNET" "$OLDPWD/examples/$model.cfg" "$DATA" "$DARKNET_WARMUP" "$DARKNET_STEPS" 2>/dev/null) >"$tmp/d.json"
                field images_per_s <"$tmp/d.json" >>"$tmp/darknet.$model"
            fi
        done
    done
    for th in 1 2; do
        echo "rep $rep/$REPS: resnet18 time, batch 16, $th thread(s)" >&2
        "$SHOAL" time examples/resnet18.cfg --batch 16 --iterations 3 --threads "$th" --json >"$tmp/s.json"
        field total_ms <"$tmp/s.json" >>"$tmp/shoal.resnet18.$th"
        OPENBLAS_NUM_THREADS=1 $PY bench/engine/torch_peer.py time --model resnet18 --batch 16 \
            --steps 3 --warmup 2 --threads "$th" >"$tmp/t.json"
        field total_ms <"$tmp/t.json" >>"$tmp/torch.resnet18.$th"
    done
done

echo
echo "engine benchmark: medians of $REPS runs, batch 64, $STEPS steps after $WARMUP warm-up ($(nproc) cores)"
printf '%-8s %7s %12s %12s %12s %13s %15s\n' model threads shoal_img/s torch_img/s darknet_img/s shoal/torch shoal/darknet
for model in lenet mlp; do
    for th in 1 2; do
        s=$(median <"$tmp/shoal.$model.$th")
        t=$(median <"$tmp/torch.$model.$th")
        d=nan
        [ -n "$DARKNET" ] && d=$(median <"$tmp/darknet.$model")
        awk -v m="$model" -v th="$th" -v s="$s" -v t="$t" -v d="$d" 'BEGIN {
            printf "%-8s %7d %12.0f %12.0f %12s %12.2fx %14sx\n", m, th, s, t,
                   (d == "nan" ? "n/a" : sprintf("%.0f", d)), s / t,
                   (d == "nan" ? "n/a" : sprintf("%.2f", s / d)) }'
    done
done
echo
for th in 1 2; do
    s=$(median <"$tmp/shoal.resnet18.$th"); t=$(median <"$tmp/torch.resnet18.$th")
    awk -v s="$s" -v t="$t" -v th="$th" 'BEGIN { printf "resnet18 forward+backward, batch 16, %d thread(s): shoal %.1f ms, torch %.1f ms, shoal/torch time %.2f (target <= 1)\n", th, s, t, s / t }'
done
s=$(median <"$tmp/shoal_rss.lenet.1"); t=$(median <"$tmp/torch_rss.lenet.1")
awk -v s="$s" -v t="$t" 'BEGIN { printf "peak RSS, LeNet training, 1 thread: shoal %.1f MB, torch %.1f MB, ratio %.2f (target <= 0.5)\n", s, t, s / t }'
