# bench/peers.sh — sourced (from the repository's root) by every benchmark that runs a peer:
# PY, the Python that has Debian's python3-torch, and the peers' BLAS kernels.
#
# Debian's OpenBLAS (0.3.21) does not recognise every recent Xeon: on a CPU that names itself
# "Intel(R) Xeon(R) Processor" it falls back to its Prescott kernels (SSE3, about a third of
# the AVX-512 speed), and PyTorch's products go through it. shoal picks OpenBLAS's kernels from
# the CPU's flags when OPENBLAS_CORETYPE is unset (src/nn/gemm.c); the same choice is made
# here for the peers, so that both sides run their best kernels. A value already set is kept.
PY=/usr/bin/python3
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
    _flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
    _has() { case " $_flags " in *" $1 "*) return 0 ;; esac; return 1; }
    if _has avx512f && _has avx512bw && _has avx512vl; then
        export OPENBLAS_CORETYPE=SkylakeX
    elif _has avx2 && _has fma; then
        export OPENBLAS_CORETYPE=Haswell
    fi
    unset -f _has
    unset _flags
fi
