/* reduce.h — reduction kernels: dst[i] = dst[i] OP src[i] for every dtype and op,
 * vectorised; float16 and bfloat16 are reduced in float32 and rounded to nearest even.
 * Also dtype/op names and parsing (shoal_dtype_name etc. from comm.h live in reduce.c).
 * Not here: which bytes meet which (algo_*.c).
 * Proved by tests/comm/test_reduce.c. */
#ifndef SH_REDUCE_H
#define SH_REDUCE_H

#include <stddef.h>
#include <stdint.h>
#include "shoal/comm.h"

/* dst = dst OP src, count elements. SHOAL_AVG reduces as SUM (the caller divides once at
 * the end with sh_reduce_scale). dst and src may not overlap partially (equal is fine). */
void sh_reduce(void *dst, const void *src, size_t count, shoal_dtype dt, shoal_op op);
/* dst = a OP b (three-operand form: saves a copy in the first step of a reduction). */
void sh_reduce3(void *dst, const void *a, const void *b, size_t count, shoal_dtype dt, shoal_op op);
/* dst[i] /= divisor for SHOAL_AVG (integers: truncating division, as MPI/NCCL do). */
void sh_reduce_avg_finish(void *dst, size_t count, shoal_dtype dt, int divisor);

/* Conversions used by the kernels and tests. */
float sh_f16_to_f32(uint16_t h);
uint16_t sh_f32_to_f16(float f);
float sh_bf16_to_f32(uint16_t h);
uint16_t sh_f32_to_bf16(float f);

#endif
