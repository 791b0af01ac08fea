#!/usr/bin/env bash
# streams.sh — one TCP connection per peer, or several? Across two hosts of the emulated
# cluster, K = 1, 2, 4 parallel streams moving NBYTES both ways at once (bench/net/streams.c),
# at each rate; medians of REPS runs, interleaved. If several streams do not move more
# bytes per second than one at the link level, they cannot speed a collective up either.
#
#   bench/net/streams.sh     # REPS=5 RATES="1gbit 10gbit none" KS="1 2 4" NBYTES=67108864
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-5}
RATES=${RATES:-"1gbit 10gbit none"}
KS=${KS:-"1 2 4"}
NBYTES=${NBYTES:-67108864}
OUT=${OUT:-bench/out/net}
export NETLAB_NAME=bstr
LAB=scripts/netlab.sh
mkdir -p "$OUT"
cc -O2 -pthread bench/net/streams.c -o "$OUT/streams"
trap '$LAB down >/dev/null 2>&1 || true' EXIT
$LAB down >/dev/null 2>&1 || true
rm -f "$OUT/streams.jsonl"
for rate in $RATES; do
    $LAB up 2 --rate "$rate" >/dev/null
    m=$($LAB addr h1)
    for rep in $(seq "$REPS"); do
        for k in $KS; do
            p=$((40000 + RANDOM % 20000))
            $LAB exec h1 "$OUT/streams" recv "$p" "$k" "$NBYTES" &
            $LAB exec h0 "$OUT/streams" send "$m" "$p" "$k" "$NBYTES" |
                sed "s/^{/{\"rate\": \"$rate\", /" >>"$OUT/streams.jsonl"
            wait
        done
    done
    $LAB down >/dev/null
done
/usr/bin/python3 - "$OUT/streams.jsonl" "$REPS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rates = list(dict.fromkeys(r["rate"] for r in rows))
ks = sorted({r["streams"] for r in rows})
print(f"GB/s each way, two hosts, both directions at once (median of {sys.argv[2]}); x 1 = K streams / 1 stream")
print(f"{'rate':>8} " + " ".join(f"{str(k) + ' str':>9}" for k in ks) + " " + " ".join(f"{'x1 @' + str(k):>7}" for k in ks[1:]))
for rate in rates:
    m = {k: statistics.median(r["gb_s"] for r in rows if r["rate"] == rate and r["streams"] == k) for k in ks}
    print(f"{rate:>8} " + " ".join(f"{m[k]:9.3f}" for k in ks) + " " + " ".join(f"{m[k] / m[ks[0]]:7.2f}" for k in ks[1:]))
PY
