/* ps/layout.h — the servers' vector when it is not a worker's whole parameter block: the parts
 * of model-parallel replicas (DistBelief: --ps with --pipeline or --tensor-parallel), or what
 * sufficient factors leave to the servers (Poseidon: --ps --sfb): see ps/layout.c.
 * Not here: the servers and clients (ps/server.c, client.c), the parts (mp/).
 * Proved by tests/cli/test_train_ps_layouts.c (and --sfb there). */
#ifndef SH_PS_LAYOUT_H
#define SH_PS_LAYOUT_H

#include <stddef.h>

#include "nn/net.h"
#include "nn/optim.h"
#include "shoal/comm.h"

typedef struct {
    size_t nparams;              /* the vector: part 0's parameters, then part 1's, ... */
    int nparts;
    size_t *worker_lo, *worker_count; /* [workers]: each worker's part's place (sh_ps_config's) */
    sh_param_range *ranges;      /* weight decay over the vector (every part's, moved there) */
    int nranges;
    size_t part_lo, part_count;  /* on a worker: its part's place */
} sh_ps_layout;

/* Every rank of the job's communicator c, servers first (nservers of them): the vector's
 * layout. A worker gives its part's index (its rank within its replica, 0 .. parts - 1) and
 * the part's net; a server gives part -1 and net NULL. Collective over c. Errors:
 * SHOAL_ERR_MISMATCH naming a worker whose part differs in size from another of the same
 * index (ranks started with another model). */
shoal_result sh_ps_layout_agree(shoal_comm *c, int nservers, int part, sh_net *net, sh_ps_layout *out);
/* The vector's first values on every rank of c into vec (nparams floats, the caller's; NULL on
 * a worker, which keeps nothing): each part's from the worker that contributes it (replica 0's:
 * contributes = 1, mine its parameters). Collective over c. */
shoal_result sh_ps_layout_start(shoal_comm *c, const sh_ps_layout *l, int contributes, const float *mine, float *vec);
void sh_ps_layout_fini(sh_ps_layout *l);

/* --ps --sfb (Poseidon): the pieces of a whole net's parameter block that the servers hold,
 * packed one after the other: everything but the weights of the connected layers that send
 * sufficient factors among the workers (dp/compress.h's rule, the same on every rank). */
typedef struct {
    size_t *off, *count;         /* [n]: pieces of the net's block, in order */
    int n;
    size_t total;                /* floats packed */
    sh_param_range *ranges;      /* the net's decay ranges in packed places */
    int nranges;
} sh_ps_pieces;

shoal_result sh_ps_pieces_sfb(sh_net *net, sh_ps_pieces *out);
void sh_ps_pieces_gather(const sh_ps_pieces *p, const float *block, float *packed);
void sh_ps_pieces_scatter(const sh_ps_pieces *p, const float *packed, float *block);
void sh_ps_pieces_fini(sh_ps_pieces *p);

#endif
