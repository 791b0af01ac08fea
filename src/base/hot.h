/* hot.h — SH_HOT: a kernel compiled for the x86-64 levels v4 (AVX-512), v3 (AVX2, FMA) and the
 * build's own, the first call choosing by the CPU (GCC's target_clones: an ifunc the loader
 * resolves), so a portable build (x86-64-v2, the Makefile's default) runs its hot loops at the
 * CPU's width. A build already for AVX2 or more (NATIVE=1) and other compilers get the plain
 * function. Put it on functions whose loop is the work (not on ones called per element: the
 * choice costs an indirect call, and a clone is never inlined).
 * Not here: kernels written per set with their own dispatch (gemm_packed.c, comm/reduce.c).
 * Proved by tests/cli/test_portable.c (the binary on emulated x86-64-v2 and AVX2 CPUs). */
#ifndef SH_HOT_H
#define SH_HOT_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__AVX2__) && \
    !defined(__SANITIZE_ADDRESS__)
#define SH_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define SH_HOT_CLONED 1
#else
#define SH_HOT
#define SH_HOT_CLONED 0
#endif

#endif
