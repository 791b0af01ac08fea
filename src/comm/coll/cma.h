/* cma.h — allreduces from 32 KiB with every rank on this host: each rank reduces its block
 * reading the others' buffers directly (process_vm_readv, or in place in a shared window)
 * and writes the finished pieces into their results (process_vm_writev) (cma.c).
 * Not here: when it is taken (select.c).
 * Proved by tests/comm/test_comm.c and tests/comm/test_transport_shm.c. */
#ifndef SH_COMM_CMA_H
#define SH_COMM_CMA_H

#include "comm/comm_internal.h"

/* 1 when c's ranks share this host's segment and op is an allreduce this path takes (from
 * 32 KiB, or any update of a window's common block), and CMA has not been refused. */
int sh_cma_fits(const shoal_comm *c, const sh_coll *op);
/* An allreduce_apply with params in a window's common block must take sh_cma_allreduce
 * whatever its size: every other path updates everything on every rank, which on one
 * shared copy would apply each step world times. */
int sh_cma_window_apply(const shoal_comm *c, const sh_coll *op);
/* The allreduce (and op->apply, each rank on its block). No mismatch check. */
shoal_result sh_cma_allreduce(shoal_comm *c, const sh_coll *op);

#endif
