#!/usr/bin/env bash
# elastic_cost.sh — what --elastic costs while nothing goes wrong: LeNet on 3 ranks of this
# machine with and without `--elastic 2`, interleaved, medians of REPS runs: images/s, their
# ratio, and the copy of the last step's state each step (keep_ms, from --json). Under --elastic
# every rank also keeps the whole optimizer state and updates all of it (no split update, no
# shared window), which the images/s include.
#
#   bench/faults/elastic_cost.sh            # REPS=5 STEPS=300 RANKS=3 CFG=examples/lenet.cfg
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-5}
STEPS=${STEPS:-300}
RANKS=${RANKS:-3}
CFG=${CFG:-examples/lenet.cfg}
DATA=${SHOAL_DATA_DIR:-/usr/share/datasets/fashion-mnist}
BUILD=${BUILD:-build}
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for r in $(seq "$REPS"); do
    for mode in plain elastic; do
        flag=""; [ $mode = elastic ] && flag="--elastic 2"
        env -u OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS=1 "$BUILD/shoal" train "$CFG" --data "$DATA" -n "$RANKS" \
            --max-steps "$STEPS" --threads 1 --json --quiet $flag 2>/dev/null | sed -n 's/^\[rank 0\] //p' |
            grep '^{' | sed "s/^/$mode /" >>"$rows"
    done
done
python3 - "$rows" "$RANKS" "$STEPS" <<'PY'
import json, statistics, sys
runs = {"plain": [], "elastic": []}
for line in open(sys.argv[1]):
    mode, doc = line.split(" ", 1)
    runs[mode].append(json.loads(doc))
ips = {m: statistics.median(r["images_per_s"] for r in v) for m, v in runs.items() if v}
keep = [r["elastic"]["keep_ms"] for r in runs["elastic"]]
print("| ranks | steps | runs | images/s plain | images/s --elastic | ratio | keep_ms per step |")
print("|---|---|---|---|---|---|---|")
print("| %s | %s | %d | %.0f | %.0f | %.3f | %.3f |" % (sys.argv[2], sys.argv[3], len(runs["elastic"]), ips.get("plain", 0),
      ips.get("elastic", 0), ips.get("elastic", 0) / ips["plain"] if ips.get("plain") else 0,
      statistics.median(keep) if keep else 0))
PY
