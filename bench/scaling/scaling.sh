#!/usr/bin/env bash
# scaling.sh — strong and weak scaling of training: 1 and 2 ranks on this host, and 1-4 hosts
# of the emulated cluster (scripts/netlab.sh, one rank a host) at 1 and 10 gbit; data
# parallelism for every model and, for AlexNet and VGG-16, the hybrid schemes (convolutional
# layers data-parallel, connected layers split: broadcast, vertical, horizontal); images/s and
# efficiency (images/s at N ranks over N times the one-rank data-parallel images/s).
#
#   bench/scaling/scaling.sh                                      # needs root for the lab
#   MODELS=examples/lenet.cfg HYBRID_MODELS=examples/lenet.cfg SCHEMES=broadcast BATCH=16 STEPS=4 \
#     HOSTS="1 2" RATES=1gbit bench/scaling/scaling.sh                       # a quick check
#
# Settings: MODELS (Darknet cfg names under ZOO, or paths) default "alexnet vgg-16 resnet50",
# HYBRID_MODELS="alexnet vgg-16" (also their paths), SCHEMES="broadcast vertical horizontal",
# MODES="strong weak", BATCH=32 (strong: the global batch; weak: each rank's), STEPS=5,
# THREADS=1 (kernel threads a rank; --data-threads 1), LOCAL="1 2", HOSTS="1 2 3 4",
# RATES="1gbit 10gbit", NETLAB=1 (0: this host only), DATA=synthetic (or a picture folder).
# Output: a table, bench/out/scaling/scaling-strong.svg and scaling-weak.svg (efficiency
# against ranks, shoal plot).
set -euo pipefail
cd "$(dirname "$0")/../.."
MODELS=${MODELS:-"alexnet vgg-16 resnet50"}
HYBRID_MODELS=${HYBRID_MODELS:-"alexnet vgg-16"}
SCHEMES=${SCHEMES:-"broadcast vertical horizontal"}
MODES=${MODES:-"strong weak"}
BATCH=${BATCH:-32}
STEPS=${STEPS:-5}
THREADS=${THREADS:-1}
LOCAL=${LOCAL:-"1 2"}
HOSTS=${HOSTS:-"1 2 3 4"}
RATES=${RATES:-"1gbit 10gbit"}
NETLAB=${NETLAB:-1}
DATA=${DATA:-synthetic}
BUILD=${BUILD:-build}
ZOO=${ZOO:-/usr/share/darknet/cfg}
OUT=bench/out/scaling
export NETLAB_NAME=${NETLAB_NAME:-scaling}
. bench/peers.sh # PY
mkdir -p "$OUT"
rm -f "$OUT"/scale-*.jsonl
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
SHOAL="$(pwd)/$BUILD/shoal"
trap '[ "$NETLAB" = 1 ] && scripts/netlab.sh down >/dev/null 2>&1 || true' EXIT

cfg_of() { [ -f "$1" ] && echo "$1" || echo "$ZOO/$1.cfg"; }
name_of() { basename "$1" .cfg; }
field() { $PY -c 'import json,sys
v="nan"
for l in sys.stdin:
    l=l.strip()
    if l.startswith("[rank 0] "): l=l[9:]
    if l.startswith("{"):
        try: v=json.loads(l).get(sys.argv[1], "nan")
        except ValueError: pass
print(v)' "$1"; }

# args for one run: mode ranks layout -> the training flags
train_args() {
    local mode=$1 n=$2 layout=$3 b=$BATCH
    if [ "$layout" = dp ]; then
        [ "$mode" = strong ] && echo "--scaling strong --batch $b" || echo "--batch $b"
    else # a hybrid's batch is the global one
        [ "$mode" = weak ] && b=$((BATCH * n))
        echo "--hybrid $layout --batch $b"
    fi
}
run_local() { # cfg mode ranks layout -> images/s
    local cfg=$1 n=$3 log="$OUT/scale-local.log" np=()
    [ "$n" -gt 1 ] && np=(-n "$n")
    # shellcheck disable=SC2046
    env -u OPENBLAS_CORETYPE "$SHOAL" train "$cfg" --data "$DATA" "${np[@]}" $(train_args "$2" "$n" "$4") --threads "$THREADS" \
        --data-threads 1 --max-steps "$STEPS" --json --quiet >"$log" 2>&1 || { tail -2 "$log" >&2; echo nan; return; }
    field images_per_s <"$log"
}
run_lab() { # cfg mode hosts layout -> images/s (the lab is up with that many hosts)
    local cfg=$1 n=$3 log="$OUT/scale-lab.log"
    # shellcheck disable=SC2046
    env -u OPENBLAS_CORETYPE scripts/netlab.sh run 1 -- "$SHOAL" train "$(realpath "$cfg")" --data "$DATA" \
        $(train_args "$2" "$n" "$4") --threads "$THREADS" --data-threads 1 --max-steps "$STEPS" --json --quiet \
        >"$log" 2>&1 || { tail -2 "$log" >&2; echo nan; return; }
    field images_per_s <"$log"
}

layouts_of() { # model -> dp and, for the hybrid models, its schemes
    local l="dp" m
    for m in $HYBRID_MODELS; do [ "$(name_of "$(cfg_of "$m")")" = "$(name_of "$1")" ] && l="dp $SCHEMES"; done
    echo "$l"
}

declare -A R # R[model,mode,layout,where,ranks] = images/s
record() { R[$1,$2,$3,$4,$5]=$6; echo "  $1 $2 $3 $4 x$5: $6 img/s" >&2; }

for m in $MODELS; do
    cfg=$(cfg_of "$m") name=$(name_of "$cfg")
    for mode in $MODES; do
        for layout in $(layouts_of "$cfg"); do
            for n in $LOCAL; do
                [ "$layout" != dp ] && [ "$n" -lt 2 ] && continue
                record "$name" "$mode" "$layout" local "$n" "$(run_local "$cfg" "$mode" "$n" "$layout")"
            done
        done
    done
done
if [ "$NETLAB" = 1 ]; then
    for rate in $RATES; do
        for h in $HOSTS; do
            scripts/netlab.sh down >/dev/null 2>&1 || true
            scripts/netlab.sh up "$h" --rate "$rate" >&2
            for m in $MODELS; do
                cfg=$(cfg_of "$m") name=$(name_of "$cfg")
                for mode in $MODES; do
                    for layout in $(layouts_of "$cfg"); do
                        [ "$layout" != dp ] && [ "$h" -lt 2 ] && continue
                        record "$name" "$mode" "$layout" "$rate" "$h" "$(run_lab "$cfg" "$mode" "$h" "$layout")"
                    done
                done
            done
        done
    done
    scripts/netlab.sh down >/dev/null 2>&1 || true
fi

echo
echo "scaling: batch $BATCH (strong: global; weak: a rank's), $THREADS thread(s) a rank, $STEPS steps, data $DATA"
printf '%-10s %-6s %-10s %-7s %5s %11s %10s\n' model mode layout where ranks images/s efficiency
wheres="local"
[ "$NETLAB" = 1 ] && wheres="local $RATES"
for m in $MODELS; do
    name=$(name_of "$(cfg_of "$m")")
    for mode in $MODES; do
        for layout in $(layouts_of "$(cfg_of "$m")"); do
            for where in $wheres; do
                ns=$LOCAL
                [ "$where" != local ] && ns=$HOSTS
                base=${R[$name,$mode,dp,$where,1]:-nan}
                for n in $ns; do
                    v=${R[$name,$mode,$layout,$where,$n]:-}
                    [ -z "$v" ] && continue
                    eff=$(awk -v v="$v" -v b="$base" -v n="$n" 'BEGIN {print (v != "nan" && b != "nan" && b > 0) ? sprintf("%.3f", v / (n * b)) : "nan"}')
                    printf '%-10s %-6s %-10s %-7s %5d %11s %10s\n' "$name" "$mode" "$layout" "$where" "$n" "$v" "$eff"
                    [ "$eff" != nan ] && echo "{\"x\":$n,\"y\":$eff,\"x_label\":\"ranks\",\"y_label\":\"$mode scaling efficiency\",\"label\":\"$name $layout $where\"}" \
                        >>"$OUT/scale-$mode-$name-$layout-$where.jsonl"
                done
            done
        done
    done
done
for mode in $MODES; do
    files=()
    for f in "$OUT"/scale-"$mode"-*.jsonl; do [ -s "$f" ] && files+=("$f"); done
    [ ${#files[@]} -gt 0 ] && "$SHOAL" plot --bench "${files[@]:0:32}" -o "$OUT/scaling-$mode.svg" >&2
done
echo "plots:$(for mode in $MODES; do printf " %s" "$OUT/scaling-$mode.svg"; done)"
