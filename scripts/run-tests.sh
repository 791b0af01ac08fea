#!/usr/bin/env bash
# run-tests.sh DIR — run every test binary under DIR with a deadline and print one total.
# Each binary prints "name: N passed, N failed" as its last line and exits non-zero on any
# failure. A binary that crashes, hangs past its deadline or prints no summary counts as one
# failure more, so a broken test can never look green.
set -u
dir=${1:?usage: run-tests.sh DIR}
deadline=${SHOAL_TEST_DEADLINE_S:-300}
filter=${SHOAL_TEST_FILTER:-}
total_pass=0; total_fail=0; bad=()
mapfile -t bins < <(find "$dir" -type f -perm -u+x -name 'test_*' | sort)
if [ ${#bins[@]} -eq 0 ]; then echo "run-tests: no test binaries under $dir" >&2; echo "0 passed, 1 failed"; exit 1; fi
for bin in "${bins[@]}"; do
    name=$(basename "$bin")
    if [ -n "$filter" ] && [[ "$name" != *$filter* ]]; then continue; fi
    log=$(mktemp)
    start=$(date +%s.%N)
    timeout -k 10 "$deadline" "$bin" >"$log" 2>&1
    rc=$?
    secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')
    summary=$(grep -E '^[A-Za-z0-9_]+: [0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    p=0; f=0
    if [ -n "$summary" ]; then
        p=$(sed -E 's/^.*: ([0-9]+) passed, ([0-9]+) failed.*/\1/' <<<"$summary")
        f=$(sed -E 's/^.*: ([0-9]+) passed, ([0-9]+) failed.*/\2/' <<<"$summary")
    fi
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    if [ -z "$summary" ]; then f=$((f > 0 ? f : 1)); fi
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    if [ $rc -ne 0 ] || [ "$f" -ne 0 ]; then
        bad+=("$name")
        echo "---- $name FAILED (exit $rc, ${secs}s); its output:"
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "     (killed after the ${deadline}s deadline)"; fi
        tail -n 60 "$log"
    else
        printf '%-40s %5s passed  %6ss\n' "$name" "$p" "$secs"
    fi
    rm -f "$log"
done
[ ${#bad[@]} -gt 0 ] && echo "failed binaries: ${bad[*]}"
echo "all tests: $total_pass passed, $total_fail failed"
[ $total_fail -eq 0 ]
