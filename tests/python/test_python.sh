#!/usr/bin/env bash
# test_python — the Python tests (tests/python/, pytest) as one test binary of `make test`:
# the module from @BUILD@/python, the shoal binary beside it, and the summary line
# scripts/run-tests.sh adds up ("test_python: N passed, N failed"; skipped ones are said,
# not counted). Made from tests/python/test_python.sh by the Makefile (@ROOT@, @BUILD@, @PYTHON@).
set -u
root=@ROOT@
build=@BUILD@
python=@PYTHON@
cd "$root" || { echo "test_python: 0 passed, 1 failed"; exit 1; }
if ! "$python" -c 'import pytest, numpy' 2>/dev/null; then
    echo "test_python: $python lacks pytest or numpy: install python3-pytest python3-numpy (scripts/deps.sh)"
    echo "test_python: 0 passed, 1 failed"
    exit 1
fi
log=$(mktemp)
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
export SHOAL_BIN=${SHOAL_BIN:-$build/shoal} SHOAL_PYTHON=$python
# One thread per rank unless a test says otherwise: the tests run several ranks on few cores.
export OMP_NUM_THREADS=1 SHOAL_THREADS=${SHOAL_THREADS:-1}
"$python" -m pytest -q -rs -p no:cacheprovider tests/python "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
last=$(grep -E '^=*.*( passed| failed| error| skipped| no tests ran).* in [0-9.]+s' "$log" | tail -1)
count() { grep -oE "[0-9]+ $1" <<<"$last" | grep -oE '^[0-9]+' || echo 0; }
p=$(count passed); f=$(count failed); e=$(count 'errors?'); s=$(count skipped)
f=$((f + e))
[ -z "$last" ] && f=$((f > 0 ? f : 1))
[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
rm -f "$log"
[ "$s" -gt 0 ] && echo "test_python: $s skipped (reasons above)"
echo "test_python: $p passed, $f failed"
[ "$f" -eq 0 ]
