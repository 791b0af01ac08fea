#!/usr/bin/env bash
# run.sh — the training techniques of issue 36 against the training they change, side by side
# in one run, one kernel thread per rank, medians of REPS interleaved repetitions:
#   hogwild   LeNet: one rank; 2 ranks synchronous data parallel; 2 ranks --hogwild (images/s,
#             accuracy after EPOCHS, staleness). Target: hogwild >= 1.9x one rank's images/s,
#             accuracy within 1 point of synchronous.
#   quorum    LeNet on 2 ranks, rank 1 slowed 3x (--debug-delay-ms: twice one rank's measured
#             step): synchronous against --quorum 0.5, data parallel and --ps sync (images/s,
#             accuracy, late gradients). Target: quorum >= 1.6x synchronous, accuracy within 1.
#   layouts   PS_MODEL with --pipeline 2 on 4 workers and --tensor-parallel 2 on 4 workers:
#             the layout alone against --ps sync, async and ssp (images/s, accuracy), and the
#             largest relative difference of the weights after 50 steps, sync against alone.
#             Target: <= 1e-5 for sync; async and ssp accuracy within 1 point of sync.
#   sfb       SFB_MODEL on 2 workers: --ps against --ps --sfb (images/s, MB the servers took
#             per step, the weights' largest relative difference after 50 steps).
#
#   bench/techniques/run.sh          # REPS=3 EPOCHS=1 MODEL=examples/lenet.cfg
#                                    # PS_MODEL=examples/lenet.cfg SFB_MODEL=examples/mlp-wide.cfg
#   REPS=1 STEPS=20 EQ_STEPS=5 bench/techniques/run.sh   # a quick check that it runs
#   ONLY=quorum bench/techniques/run.sh                    # one table (hogwild|quorum|layouts|sfb)
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-3}
EPOCHS=${EPOCHS:-1}
STEPS=${STEPS:-}             # set: --max-steps STEPS instead of --epochs (a quick check)
EQ_STEPS=${EQ_STEPS:-50}     # the exactness runs' steps
MODEL=${MODEL:-examples/lenet.cfg}
PS_MODEL=${PS_MODEL:-examples/lenet.cfg}
SFB_MODEL=${SFB_MODEL:-examples/mlp-wide.cfg}
ONLY=${ONLY:-all}
BUILD=${BUILD:-build}
. bench/peers.sh # PY
export SHOAL_DATA_DIR=${SHOAL_DATA_DIR:-/usr/share/datasets/fashion-mnist}
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
OUT=bench/out/techniques
mkdir -p "$OUT"
LONG=${STEPS:+--max-steps $STEPS}
LONG=${LONG:---epochs $EPOCHS}
HOW=${STEPS:+$STEPS steps}
HOW=${HOW:-$EPOCHS epoch(s)}

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
num() { grep -o "\"$2\":[-0-9.e]*" "$1" | head -1 | cut -d: -f2; }        # FILE KEY: first number
pushed() { grep -o '[0-9.]* MB pushed' "$1" | head -1 | cut -d' ' -f1; }  # the first server's MB
train() { # NAME ARGS...: one run into $OUT/NAME.REP.txt (stdout and stderr)
    local name=$1
    shift
    env -u OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS=1 "$BUILD/shoal" train "$@" --threads 1 --json \
        >"$OUT/$name.$rep.txt" 2>&1 || { echo "run $name failed: $OUT/$name.$rep.txt" >&2; tail -3 "$OUT/$name.$rep.txt" >&2; }
}
med() { for r in $(seq 1 "$REPS"); do num "$OUT/$1.$r.txt" "$2"; done | median; } # NAME KEY
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2fx", a / b; else printf "nan"}'; }
points() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%+.2f", 100 * (a - b)}'; }
# the largest |a - b| / (|b| + 1e-3) over two checkpoints' "params" sections
maxrel() {
    "$PY" - "$1" "$2" <<'EOF'
import struct, sys
import numpy as np
def params(path):
    b = open(path, 'rb').read()
    n, o = struct.unpack('<I', b[12:16])[0], 16
    for _ in range(n):
        name = b[o:o + 32].rstrip(b'\0').decode()
        nb = struct.unpack('<Q', b[o + 32:o + 40])[0]
        if name == 'params':
            return np.frombuffer(b[o + 44:o + 44 + nb], np.float32)
        o += 44 + nb
a, b = params(sys.argv[1]), params(sys.argv[2])
print('%.3g' % (np.max(np.abs(a - b) / (np.abs(b) + 1e-3)) if a.shape == b.shape else float('nan')))
EOF
}

if [ "$ONLY" = all ] || [ "$ONLY" = hogwild ]; then
    for rep in $(seq 1 "$REPS"); do
        train one "$MODEL" $LONG
        train dp "$MODEL" -n 2 $LONG
        train hogwild "$MODEL" -n 2 --hogwild $LONG
    done
    one=$(med one images_per_s); dp=$(med dp images_per_s); hw=$(med hogwild images_per_s)
    echo "## --hogwild: $MODEL, 2 ranks on one host, $HOW, medians of $REPS"
    echo "| run | images/s | vs one rank | test accuracy | vs synchronous (points) | staleness mean / max |"
    echo "|---|---|---|---|---|---|"
    echo "| one rank | $one | 1.00x | $(med one accuracy) | | |"
    echo "| 2 ranks synchronous | $dp | $(ratio "$dp" "$one") | $(med dp accuracy) | 0 | |"
    echo "| 2 ranks --hogwild | $hw | $(ratio "$hw" "$one") | $(med hogwild accuracy) | $(points "$(med hogwild accuracy)" "$(med dp accuracy)") | $(med hogwild staleness_mean) / $(med hogwild staleness_max) |"
    echo
fi

if [ "$ONLY" = all ] || [ "$ONLY" = quorum ]; then
    rep=0
    train probe "$MODEL" --max-steps 60 # one rank's step, for the drill: slowed 3x = sleeps 2 steps
    step_ms=$(awk -v ips="$(num "$OUT/probe.0.txt" images_per_s)" -v b=64 'BEGIN {printf "%d", (ips > 0 ? 1000 * b / ips : 20)}')
    delay=$((2 * step_ms))
    drill="--debug-delay-rank 1 --debug-delay-ms $delay"
    for rep in $(seq 1 "$REPS"); do
        train sync "$MODEL" -n 2 $LONG $drill
        train quorum "$MODEL" -n 2 --quorum 0.5 $LONG $drill
        train ps_sync "$MODEL" --ps -n 2 $LONG $drill
        train ps_quorum "$MODEL" --ps -n 2 --quorum 0.5 $LONG $drill
    done
    echo "## --quorum 0.5: $MODEL, 2 ranks, $HOW, rank 1 sleeps $delay ms a step (one rank's step: $step_ms ms), medians of $REPS"
    echo "| run | images/s | vs synchronous | test accuracy | vs synchronous (points) | late gradients |"
    echo "|---|---|---|---|---|---|"
    for pair in "sync quorum" "ps_sync ps_quorum"; do
        set -- $pair
        s=$(med "$1" images_per_s); q=$(med "$2" images_per_s)
        echo "| $1 | $s | 1.00x | $(med "$1" accuracy) | 0 | |"
        echo "| $2 | $q | $(ratio "$q" "$s") | $(med "$2" accuracy) | $(points "$(med "$2" accuracy)" "$(med "$1" accuracy)") | $(med "$2" late) |"
    done
    echo "(the servers' late pushes are in $OUT/ps_quorum.*.txt)"
    echo
fi

if [ "$ONLY" = all ] || [ "$ONLY" = layouts ]; then
    for layout in "--pipeline 2" "--tensor-parallel 2"; do
        tag=$(echo "$layout" | tr -d ' -')
        for rep in $(seq 1 "$REPS"); do
            train "$tag.alone" "$PS_MODEL" -n 4 $layout $LONG
            for m in sync async ssp; do train "$tag.$m" "$PS_MODEL" --ps -n 4 $layout --consistency $m $LONG; done
        done
        rep=eq
        train "$tag.eq_alone" "$PS_MODEL" -n 4 $layout --max-steps "$EQ_STEPS" --save "$OUT/$tag.alone.ckpt"
        train "$tag.eq_ps" "$PS_MODEL" --ps -n 4 $layout --max-steps "$EQ_STEPS" --save "$OUT/$tag.ps.ckpt"
        diff=$(maxrel "$OUT/$tag.ps.ckpt" "$OUT/$tag.alone.ckpt")
        alone=$(med "$tag.alone" images_per_s)
        echo "## --ps over $layout: $PS_MODEL, 4 workers (+1 server), $HOW, medians of $REPS; sync after $EQ_STEPS steps: weights within $diff (relative) of the layout alone"
        echo "| run | images/s | vs the layout alone | test accuracy | vs sync (points) |"
        echo "|---|---|---|---|---|"
        echo "| $layout alone | $alone | 1.00x | $(med "$tag.alone" accuracy) | |"
        for m in sync async ssp; do
            echo "| --ps $m | $(med "$tag.$m" images_per_s) | $(ratio "$(med "$tag.$m" images_per_s)" "$alone") | $(med "$tag.$m" accuracy) | $(points "$(med "$tag.$m" accuracy)" "$(med "$tag.sync" accuracy)") |"
        done
        echo
    done
fi

if [ "$ONLY" = all ] || [ "$ONLY" = sfb ]; then
    for rep in $(seq 1 "$REPS"); do
        train ps "$SFB_MODEL" --ps -n 2 $LONG
        train ps_sfb "$SFB_MODEL" --ps -n 2 --sfb $LONG
    done
    rep=eq
    train eq_ps "$SFB_MODEL" --ps -n 2 --max-steps "$EQ_STEPS" --save "$OUT/sfb.ps.ckpt"
    train eq_sfb "$SFB_MODEL" --ps -n 2 --sfb --max-steps "$EQ_STEPS" --save "$OUT/sfb.sfb.ckpt"
    diff=$(maxrel "$OUT/sfb.sfb.ckpt" "$OUT/sfb.ps.ckpt")
    p=$(med ps images_per_s); f=$(med ps_sfb images_per_s)
    mb() { for r in $(seq 1 "$REPS"); do awk -v mb="$(pushed "$OUT/$1.$r.txt")" -v s="$(num "$OUT/$1.$r.txt" steps)" 'BEGIN {printf "%.3f\n", (s > 0 ? mb / s / 2 : 0)}'; done | median; }
    echo "## --ps --sfb: $SFB_MODEL, 2 workers, $HOW, medians of $REPS; after $EQ_STEPS steps the weights are within $diff (relative) of --ps alone"
    echo "| run | images/s | vs --ps | MB a worker pushes per step | test accuracy |"
    echo "|---|---|---|---|---|"
    echo "| --ps | $p | 1.00x | $(mb ps) | $(med ps accuracy) |"
    echo "| --ps --sfb | $f | $(ratio "$f" "$p") | $(mb ps_sfb) | $(med ps_sfb accuracy) |"
fi
