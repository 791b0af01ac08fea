#!/usr/bin/env bash
# fuzz.sh [SECONDS] [TARGET...] — build the libFuzzer targets (tests/fuzz/fuzz_*.c) with clang
# under ASan+UBSan into build/fuzz/ and run each for SECONDS (default 600) on a scratch copy
# of its seed corpus (tests/fuzz/corpus/<target>/). Prints per target: executions,
# coverage, features and any crash file; exits 1 when any target found something.
# Not in CI's time budget: `make test` runs every target briefly through tests/fuzz/driver.c
# (gcc, no clang needed). See docs/fuzzing.md.
#
#   scripts/fuzz.sh                 every target, 10 minutes each, one after the other
#   scripts/fuzz.sh 60 cfg idx      two targets, one minute each
#   FUZZ_JOBS=2 scripts/fuzz.sh     two targets at a time (nice -n 10)
#   FUZZ_ARGS='-max_len=8192'       extra libFuzzer flags
set -u
cd "$(dirname "$0")/.."
secs=${1:-600}
[ $# -gt 0 ] && shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do t=${f##*/fuzz_}; targets+=("${t%.c}"); done
fi
CLANG=${CLANG:-clang}
if ! command -v "$CLANG" >/dev/null; then
    echo "fuzz.sh: $CLANG not found; install it: apt-get install -y clang libclang-rt-14-dev" >&2
    exit 2
fi
out=build/fuzz
jobs=${FUZZ_JOBS:-1}
flags="-std=c11 -D_GNU_SOURCE -DSHOAL_HAVE_MPI=0 -g -O1 -fno-omit-frame-pointer -pthread \
 -Iinclude -Isrc -Itests -fsanitize=address,undefined -fno-sanitize-recover=undefined"
mkdir -p "$out/obj" "$out/runs"

# The library once, instrumented for coverage (fuzzer-no-link), as an archive: a target that
# includes a source file itself (fuzz_store.c includes store_server.c) takes that file's symbols first.
echo "fuzz.sh: building the library with $CLANG into $out"
objs=()
fail=0
# Caffe's messages (src/nn/caffe/caffe.proto), generated as the Makefile does
mkdir -p "$out/gen"
protoc-c --proto_path=src --c_out="$out/gen" src/nn/caffe/caffe.proto || exit 2
objs+=("$out/obj/caffe.pb-c.o")
$CLANG $flags -I"$out/gen" -w -c "$out/gen/nn/caffe/caffe.pb-c.c" -o "$out/obj/caffe.pb-c.o" || exit 2
for src in $(find src/base src/comm src/nn src/data src/train src/io -name '*.c' | sort); do
    obj=$out/obj/${src//\//_}.o
    objs+=("$obj")
    if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ -n "$(find src -name '*.h' -newer "$obj" -print -quit)" ]; then
        $CLANG $flags -I"$out/gen" -fsanitize=fuzzer-no-link -c "$src" -o "$obj" || fail=1
    fi
done
[ $fail -eq 0 ] || { echo "fuzz.sh: library build failed" >&2; exit 2; }
rm -f $out/libshoal-fuzz.a && ar rcs $out/libshoal-fuzz.a "${objs[@]}"
for t in "${targets[@]}"; do
    [ -f tests/fuzz/fuzz_$t.c ] || { echo "fuzz.sh: no target tests/fuzz/fuzz_$t.c" >&2; exit 2; }
    $CLANG $flags -fsanitize=fuzzer tests/fuzz/fuzz_$t.c $out/libshoal-fuzz.a \
        -lcrypto -ljpeg -lpng -lz -ldl -lm -lrt -lprotobuf-c -o $out/fuzz_$t || { echo "fuzz.sh: building fuzz_$t failed" >&2; exit 2; }
done

# Per-target flags: CIFAR-10 inputs of two whole records (2 x 3073 bytes) pass libFuzzer's
# default length limit of 4096.
target_args() {
    case $1 in
    cifar) echo -max_len=8192 ;;
    esac
}

run_one() {
    local t=$1 dir=$out/runs/$1
    rm -rf "$dir" && mkdir -p "$dir/corpus" "$dir/crashes"
    cp tests/fuzz/corpus/$t/* "$dir/corpus/" 2>/dev/null
    # -rss_limit_mb / -malloc_limit_mb: a reader that believes a header and asks for
    # gigabytes is a finding (out-of-memory), like a crash.
    nice -n 10 $out/fuzz_$t -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$dir/crashes/" \
        $(target_args "$t") ${FUZZ_ARGS:-} "$dir/corpus" >"$dir/log" 2>&1
    echo $? >"$dir/rc"
}

running=0
for t in "${targets[@]}"; do
    echo "fuzz.sh: fuzz_$t for ${secs}s (log: $out/runs/$t/log)"
    run_one "$t" &
    running=$((running + 1))
    if [ $running -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait

found=0
printf '%-10s %12s %10s %10s %8s  %s\n' target executions exec/s coverage features findings
for t in "${targets[@]}"; do
    dir=$out/runs/$t
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/log" | grep -o '[0-9]*$')
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$dir/log" | grep -o '[0-9]*$')
    cov=$(grep -o 'cov: [0-9]*' "$dir/log" | tail -1 | grep -o '[0-9]*')
    ft=$(grep -o 'ft: [0-9]*' "$dir/log" | tail -1 | grep -o '[0-9]*')
    crashes=$(ls "$dir/crashes" 2>/dev/null | sed "s|^|$dir/crashes/|" | tr '\n' ' ')
    rc=$(cat "$dir/rc" 2>/dev/null || echo ?)
    if [ -n "$crashes" ] || [ "$rc" != 0 ]; then
        found=1
        [ -n "$crashes" ] || crashes="exit $rc, see $dir/log"
    fi
    printf '%-10s %12s %10s %10s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" \
        "${ft:-?}" "${crashes:-none}"
done
exit $found
