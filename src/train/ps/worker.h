/* ps/worker.h — the parameter-server worker strategy (see ps/worker.c).
 * Not here: the servers (ps/ps.h). Proved by tests/train/test_strategy_ps.c. */
#ifndef SH_STRATEGY_PS_H
#define SH_STRATEGY_PS_H

#include "train/ps/ps.h"
#include "train/strategy.h"

typedef struct {
    int push_every; /* async: push the mean of this many steps' gradients (Downpour's n_push) */
    int pull_every; /* async: refresh the parameters every this many steps (n_fetch) */
} sh_ps_worker_opts;

/* A worker of the parameter-server job on c (rank >= cfg->nservers). Its rank and world
 * are among the workers, so the data loader shards every global batch across them. */
shoal_result sh_strategy_ps_create(shoal_comm *c, const sh_ps_config *cfg, const sh_ps_worker_opts *o,
                                   sh_strategy **out);
/* Before attach, --sfb (Poseidon): the workers' own communicator (takes ownership), over which
 * the connected layers that send sufficient factors exchange them; the servers' vector is
 * then sh_ps_pieces_sfb's (cfg->nparams its total). Sync mode only. */
void sh_strategy_ps_sfb(sh_strategy *s, shoal_comm *workers);
/* After training: say goodbye to the servers and wait for their answer, which settles
 * whether this worker is the lead (*is_lead: it reports). Destroy without this only says
 * goodbye (a worker that failed). */
shoal_result sh_strategy_ps_close(sh_strategy *s, int *is_lead);

#endif
