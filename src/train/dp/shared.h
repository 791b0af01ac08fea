/* dp/shared.h — what the one-host strategies (--hogwild, --quorum) share: the window that holds
 * their one copy of the weights, its control area's size, rank 0's statistics for everyone, the
 * strategy's allocation.
 * Not here: the window itself (shoal/comm.h). Proved by tests/train/test_stragglers.c. */
#ifndef SH_DP_SHARED_H
#define SH_DP_SHARED_H

#include <stddef.h>

#include "nn/net.h"
#include "shoal/comm.h"
#include "train/strategy.h"

/* A strategy over c with ops and a zeroed impl of impl_nbytes (the ops' destroy frees both);
 * rank, world, job_rank and job_world are c's. SHOAL_ERR_NOMEM; *out NULL on error. */
shoal_result sh_dp_shared_create(shoal_comm *c, const sh_strategy_ops *ops, size_t impl_nbytes, sh_strategy **out);

/* Bytes of a control area of one 64-byte line ahead of one line per rank, whole pages. */
enum { SH_DP_SHARED_LINE = 64 };
size_t sh_dp_shared_ctl_nbytes(int world);

/* A window over c (common_nbytes shared, block_nbytes each rank's), for the strategy named by
 * flag. Where the ranks span hosts: SHOAL_ERR_INVALID, "<needs> needs every rank on one host
 * (<shares>: the reason); across hosts use <across>"; other errors carry "<flag>: the shared
 * weights: " ahead. Collective; *out is the caller's (freed with the communicator). */
shoal_result sh_dp_shared_window(shoal_comm *c, size_t common_nbytes, size_t block_nbytes, const char *flag,
                                 const char *needs, const char *shares, const char *across, shoal_window **out);

/* Rank 0's running statistics (batch norm's) for every rank, then a barrier: no rank reads the
 * shared weights before rank 0 put them there. Collective. */
shoal_result sh_dp_shared_start(shoal_comm *c, sh_net *net);

#endif
