#!/usr/bin/env bash
# elastic_accuracy.sh — a rank killed at a random moment of a 2-epoch LeNet run on 3 ranks
# (`--elastic 2`): the job finishes on 2; its test accuracy against the unbroken run's (within
# 1 point is the goal), the pause (at most SHOAL_TIMEOUT + 2 s) and the steps redone (at most
# the one in flight), over RUNS kills (bench/faults/drill.py; one line a run, a table).
#
#   bench/faults/elastic_accuracy.sh                 # RUNS=5, 3 ranks on this machine
#   HOSTS=3 bench/faults/elastic_accuracy.sh         # one rank on each of 3 emulated hosts, a link cut
#                                                    # instead of a kill (KINDS=cut; root)
# Variables: RUNS (5), HOSTS (1 or 3), KINDS (kill; cut with HOSTS=3), EPOCHS (2), TIMEOUT_MS (5000).
set -euo pipefail
cd "$(dirname "$0")/../.."
HOSTS=${HOSTS:-1}
export FAULTS=${RUNS:-5} EPOCHS=${EPOCHS:-2} HOSTS
export KINDS=${KINDS:-$([ "$HOSTS" = 3 ] && echo cut || echo kill)}
export OUT=${OUT:-bench/out/faults-accuracy}
exec bench/faults/elastic.sh
