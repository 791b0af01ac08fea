#!/usr/bin/env bash
# run.sh — character-level recurrent nets: shoal against PyTorch (nn.LSTM / nn.GRU / nn.RNN)
# and Darknet (`darknet rnn train`), all on the same text in one run, interleaved:
#   1. training characters/s, each kind, 1 and 2 threads (medians of REPS runs, ratios);
#   2. data parallel: shoal on 2 ranks (1 thread each) against 1 rank, same per-rank batch;
#   3. held-out bits/char after BUDGET_S seconds of training on one thread, shoal vs PyTorch.
#
#   bench/rnn/run.sh                                   # full: about 30 min + 2 x BUDGET_S per kind
#   REPS=1 STEPS=3 BUDGET_S=5 HIDDEN=32 BATCH=4 bench/rnn/run.sh   # a smoke run, ~1 min
#
# Model (examples/char-{lstm,gru,rnn}.cfg, rewritten for HIDDEN/BATCH/TIME_STEPS): one-hot of
# 256 bytes -> 2 recurrent layers of HIDDEN -> connected 256 -> softmax; Adam 0.002. PyTorch
# runs the same sizes (bench/rnn/torch_char.py; for "rnn" nn.RNN(tanh) plus, per layer, the
# output sublayer of Darknet's [rnn], a tanh connected layer, so both do the same arithmetic).
# PyTorch's threads: T threads means OPENBLAS_NUM_THREADS=T (its GEMMs go to OpenBLAS, which
# otherwise takes every core even at torch.set_num_threads(1)) and OMP_WAIT_POLICY=passive
# (with spinning OpenMP threads beside OpenBLAS's, 2 threads ran 4x slower than 1). Debian's Darknet
# crashes training [lstm] and [rnn] with time_steps > 1 on the CPU and its CPU [gru] has an
# empty backward pass; the table says what it did.
# TEXT: default the fortunes package's English text (about 2.5 MB), concatenated.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
REPS=${REPS:-3}
STEPS=${STEPS:-30}              # timed steps per throughput run (after warm-up ones)
HIDDEN=${HIDDEN:-256}
BATCH=${BATCH:-64}              # streams
TIME_STEPS=${TIME_STEPS:-32}
KINDS=${KINDS:-lstm gru rnn}
BUDGET_S=${BUDGET_S:-600}       # 0: skip the bits/char comparison
DARKNET_S=${DARKNET_S:-60}      # seconds Darknet gets per kind (0: skip Darknet)
. bench/peers.sh # PY, and the peers' BLAS kernels (OPENBLAS_CORETYPE)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# SHOAL_BIN: a shoal binary to time instead of building $BUILD/shoal (an older build, side by side)
if [ -n "${SHOAL_BIN:-}" ]; then
    SHOAL=$SHOAL_BIN
else
    make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
    SHOAL=$PWD/$BUILD/shoal
fi

TEXT=${TEXT:-}
if [ -z "$TEXT" ]; then
    TEXT=$tmp/fortunes.txt
    for f in /usr/share/games/fortunes/*; do
        case $f in *.dat|*.u8) ;; *) [ -f "$f" ] && cat "$f" ;; esac
    done >"$TEXT"
fi
[ -s "$TEXT" ] || { echo "no text: install fortunes (or set TEXT=FILE)" >&2; exit 1; }

cfg_for() { # kind -> a cfg with the sizes asked for
    sed -e "s/^batch=.*/batch=$BATCH/" -e "s/^time_steps=.*/time_steps=$TIME_STEPS/" \
        -e "s/^output=256$/output=$HIDDEN/" -e "s/^hidden=256$/hidden=$HIDDEN/" \
        "examples/char-$1.cfg" | awk -v h="$HIDDEN" '
        /^\[connected\]/ {conn = 1} conn && /^output=/ {print "output=256"; next} {print}' \
        >"$tmp/$1.cfg"
    echo "$tmp/$1.cfg"
}
json() { sed -E "s/.*\"$1\": ?([0-9.eE+-]+).*/\1/"; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { if [ "$1" = - ] || [ "$2" = - ]; then echo -; else echo "$1 $2" | awk '{printf "%.2fx", $1 / $2}'; fi; }
warm=$(( STEPS / 10 < 20 ? STEPS / 10 : 20 ))
shoal_steps=$(( STEPS + warm + 1 ))

for kind in $KINDS; do
    cfg=$(cfg_for "$kind")
    for rep in $(seq "$REPS"); do
        for th in 1 2; do
            "$SHOAL" train "$cfg" --data "$TEXT" --max-steps "$shoal_steps" --threads "$th" \
                --quiet --json 2>/dev/null | json chars_per_s >>"$tmp/shoal.$kind.$th"
            OPENBLAS_NUM_THREADS=$th OMP_WAIT_POLICY=passive \
            $PY bench/rnn/torch_char.py --data "$TEXT" --kind "$kind" --hidden "$HIDDEN" \
                --batch "$BATCH" --time-steps "$TIME_STEPS" --threads "$th" --steps "$shoal_steps" |
                json chars_per_s >>"$tmp/torch.$kind.$th"
        done
        # data parallel: 2 ranks of BATCH streams each against 1 rank of BATCH
        "$SHOAL" train "$cfg" --data "$TEXT" --max-steps "$shoal_steps" --threads 1 -n 2 \
            --quiet --json 2>/dev/null | json chars_per_s >>"$tmp/dp2.$kind"
    done
    # Darknet: the same cfg (adam=1 for optimizer=adam); seconds per iteration from its log
    sed -e 's/^optimizer=adam/adam=1/' -e '/^#/d' -e 's/^\[net\]/[net]\nmax_batches=1000000/' \
        "$cfg" >"$tmp/dk.$kind.cfg"
    : >"$tmp/dk.$kind.log"
    if [ "$DARKNET_S" -gt 0 ]; then # 0: skip Darknet (timeout 0 would mean no limit)
        ( cd "$tmp" && timeout "$DARKNET_S" darknet rnn train "dk.$kind.cfg" -file "$TEXT" \
            >"dk.$kind.log" 2>&1; echo $? >"dk.$kind.rc" ) || true
    else
        echo skipped >"$tmp/dk.$kind.rc"
    fi
    grep -E '^[0-9]+: .* seconds' "$tmp/dk.$kind.log" | tail -n +2 |
        sed -E 's/.*, ([0-9.]+) seconds.*/\1/' |
        awk -v c=$((BATCH * TIME_STEPS)) '$1 > 0 {print c / $1}' >"$tmp/darknet.$kind" || true
done

echo "character-level training: $HIDDEN hidden x 2 layers, $BATCH streams x $TIME_STEPS steps, medians of $REPS runs of $STEPS steps ($(nproc) cores)"
printf '%-6s %7s %12s %12s %12s %12s %14s\n' kind threads shoal_ch/s torch_ch/s darknet_ch/s shoal/torch shoal/darknet
for kind in $KINDS; do
    d=$(median <"$tmp/darknet.$kind")
    note=""
    rc=$(cat "$tmp/dk.$kind.rc" 2>/dev/null || echo ?)
    if [ "$rc" = skipped ]; then note="  (darknet skipped: DARKNET_S=0)"
    elif [ "$d" = - ]; then note="  (darknet: no timed iteration in ${DARKNET_S}s, exit $rc$([ "$rc" != 139 ] || echo ': segmentation fault'))"
    elif [ "$kind" = gru ]; then note="  (darknet's CPU GRU has an empty backward pass)"; fi
    for th in 1 2; do
        s=$(median <"$tmp/shoal.$kind.$th"); t=$(median <"$tmp/torch.$kind.$th")
        printf '%-6s %7s %12.0f %12.0f %12s %12s %14s%s\n' "$kind" "$th" "$s" "$t" "$d" \
            "$(ratio "$s" "$t")" "$(ratio "$s" "$d")" "$note"
        note=""
    done
done
echo
printf '%-6s %14s %14s %8s\n' kind 1rank_ch/s 2ranks_ch/s speedup
for kind in $KINDS; do
    s1=$(median <"$tmp/shoal.$kind.1"); s2=$(median <"$tmp/dp2.$kind")
    printf '%-6s %14.0f %14.0f %8s\n' "$kind" "$s1" "$s2" "$(ratio "$s2" "$s1")"
done

if [ "$BUDGET_S" -gt 0 ]; then
    echo
    echo "held-out bits/char after ${BUDGET_S}s of training on 1 thread (lower is better)"
    printf '%-6s %12s %12s %12s %12s\n' kind shoal_bpc torch_bpc shoal_steps torch_steps
    for kind in $KINDS; do
        cfg=$(cfg_for "$kind")
        sj=$("$SHOAL" train "$cfg" --data "$TEXT" --time-limit "$BUDGET_S" --epochs 1000 \
             --threads 1 --quiet --json 2>/dev/null)
        tj=$(OPENBLAS_NUM_THREADS=1 $PY bench/rnn/torch_char.py --data "$TEXT" --kind "$kind" --hidden "$HIDDEN" \
             --batch "$BATCH" --time-steps "$TIME_STEPS" --threads 1 --seconds "$BUDGET_S" --eval)
        printf '%-6s %12.4f %12.4f %12s %12s\n' "$kind" "$(echo "$sj" | json test_bpc)" \
            "$(echo "$tj" | json test_bpc)" "$(echo "$sj" | json steps)" "$(echo "$tj" | json steps)"
    done
fi
echo "ratios: shoal's speed over the peer's (> 1: shoal faster); load average $(cut -d' ' -f1-3 /proc/loadavg)"
