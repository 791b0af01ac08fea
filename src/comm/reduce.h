/* reduce.h — reduction kernels: dst[i] = dst[i] OP src[i] for every dtype and op,
 * vectorised; float16 and bfloat16 are reduced in float32 and rounded to nearest even.
 * Also dtype/op names and parsing (shoal_dtype_name etc. from comm.h live in reduce.c).
 * Not here: which bytes meet which (coll/).
 * Proved by tests/comm/test_reduce.c. */
#ifndef SH_REDUCE_H
#define SH_REDUCE_H

#include <stddef.h>
#include <stdint.h>
#include "shoal/comm.h"

/* dst = dst OP src, count elements. SHOAL_AVG reduces as SUM (the caller divides once at
 * the end with sh_reduce_avg_finish). Integer sum/prod wrap (two's complement). Float
 * min/max propagate NaN (either operand NaN gives NaN; -0 vs +0 gives src). dst and src may not overlap partially (equal is fine). */
void sh_reduce(void *dst, const void *src, size_t count, shoal_dtype dt, shoal_op op);
/* dst = a OP b (three-operand form: saves a copy in the first step of a reduction). */
void sh_reduce3(void *dst, const void *a, const void *b, size_t count, shoal_dtype dt, shoal_op op);
/* dst[i] /= divisor for SHOAL_AVG (integers: truncating division, as MPI/NCCL do). */
void sh_reduce_avg_finish(void *dst, size_t count, shoal_dtype dt, int divisor);

/* memcpy with non-temporal stores: for results written once and not read again soon, so
 * the CPU does not first read every destination line into cache. */
void sh_copy_stream(void *dst, const void *src, size_t nbytes);

/* The kernel sets: sh_reduce/sh_reduce3 use the best one the CPU supports (chosen once).
 * Tests and the benchmark run each set by name; an unsupported set runs the scalar one. */
typedef enum { SH_ISA_SCALAR, SH_ISA_AVX2, SH_ISA_AVX512, SH_ISA_COUNT } sh_reduce_isa;
int sh_reduce_isa_supported(sh_reduce_isa isa);
sh_reduce_isa sh_reduce_isa_best(void);
const char *sh_reduce_isa_name(sh_reduce_isa isa);
void sh_reduce3_isa(sh_reduce_isa isa, void *dst, const void *a, const void *b, size_t count,
                    shoal_dtype dt, shoal_op op);
void sh_reduce_avg_finish_isa(sh_reduce_isa isa, void *dst, size_t count, shoal_dtype dt,
                              int divisor);

/* Conversions used by the kernels and tests (round to nearest even; NaN stays NaN, quiet,
 * keeping its sign and top payload bits). */
float sh_f16_to_f32(uint16_t h);
uint16_t sh_f32_to_f16(float f);
float sh_bf16_to_f32(uint16_t h);
uint16_t sh_f32_to_bf16(float f);

/* Element i of a buffer of dtype dt, as a double, and back (integers truncate, float16
 * and bfloat16 round to nearest even): for checking results, never in a hot loop. Used by
 * `shoal bench -c` and the collective tests. */
double sh_reduce_elem_get(const void *buf, size_t i, shoal_dtype dt);
void sh_reduce_elem_put(void *buf, size_t i, shoal_dtype dt, double v);

#endif
