/* ps/ps.h — the parameter server (DistBelief, Project Adam, MXNet's KVStore): the first S ranks
 * hold the parameters in shards and apply the optimizer, the others pull and push; sync, async
 * (Downpour) and ssp (stale-synchronous) consistency.
 * Not here: the training step around pull/push (ps/worker.c), the network (src/nn).
 * Proved by tests/train/test_ps.c. */

/* Shards are contiguous and balanced by bytes. sync: a round's gradients are averaged and
 * applied once; async: every push is applied at once, pulls never wait; ssp: a worker that
 * has pushed c clocks is served only when every live worker has pushed c - s. */
#ifndef SH_PS_H
#define SH_PS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "io/tb_events.h"
#include "nn/optim.h"
#include "shoal/comm.h"

typedef enum { SH_PS_SYNC = 0, SH_PS_ASYNC, SH_PS_SSP } sh_ps_consistency;

typedef struct {
    int nservers;                 /* ranks 0 .. nservers-1 serve; the rest are workers */
    sh_ps_consistency consistency;
    int staleness;                /* ssp: s clocks */
    size_t nparams;               /* the whole parameter vector, in floats */
    const sh_param_range *ranges; /* weight-decay flags over the whole vector (may be NULL) */
    int nranges;
    sh_optim_config optim;
    sh_lr_policy lr;
    /* sync: a round closes once ceil(quorum x live workers) fresh pushes are in (pushes from
     * workers that pulled the current weights); a late push is added to the next round, and
     * its worker's pull is answered at once. 0: every live worker's push (plain sync). */
    double quorum;
    int timeout_ms;               /* a worker silent this long is dropped (async, ssp) or
                                     stops the job (sync); 0: SHOAL_TIMEOUT */
    /* Server checkpoints: server k writes PATH.server<k> (its shard, optimizer state and
     * update count; atomic, checksummed) every save_every updates of a whole round and at
     * the end, and starts from RESUME.server<k> when resume_path is set. NULL: none. */
    const char *save_path;
    int64_t save_every;
    const char *resume_path;
    /* Called by a server (async, ssp) when it drops worker rank `rank` (silent, or gone), so
     * the job can stop waiting for it (the launcher ends it). NULL: nothing. */
    void (*on_drop)(int rank);
    /* Called by server `server` after each whole round of updates (rounds counted from the
     * start), with hook_ctx: fault drills and debugging live there. NULL: none. */
    void (*after_round)(void *hook_ctx, int server, int64_t rounds);
    void *hook_ctx;
    /* Clock lines (sh_ps_server_clock_line) written to clock_log every clock_log_ms while
     * the server runs (0: only one) and once when it ends. NULL: none. */
    FILE *clock_log;
    int clock_log_ms;
    /* TensorBoard (borrowed; NULL: none): after each whole round, ps/clock_spread (fastest
     * minus slowest live worker) and ps/clock/w<N> (each worker's clock), at step = rounds. */
    sh_tb *tb;
    /* Each worker's range of the vector, [worker_lo[w], + worker_count[w]) for worker w (rank
     * nservers + w): the part of the model its replica gives it (a pipeline stage, tensor
     * shares; ps/layout.c). The ranges of one part are equal, different parts do not overlap,
     * and each element is the part of as many workers as there are replicas. NULL: every
     * worker holds the whole vector. A worker pushes and pulls its range, and only to the
     * servers whose shards it meets. */
    const size_t *worker_lo, *worker_count;
    /* Pushes travel compressed with this codec (NONE, fp16, bf16, 1bit, topk; a worker
     * keeps the error feedback of its pushes, a server decodes); pulls stay float32. Every
     * rank must hold the same codec: a server refuses a push made with another. */
    shoal_codec_opts codec;
    /* The job's options every rank must share, one line each ("--compress 1bit"; train_opts.h);
     * NULL: none. Each worker's first message to a server carries them, with the settings
     * above, and a server whose own differ stops the job naming the option and both ranks. */
    const char *settings;
} sh_ps_config;

/* What a worker and a server compare at first contact: the consistency, staleness, codec,
 * servers and model size, then cfg->settings, one line each. The text's length (cut to
 * nbytes - 1). */
size_t sh_ps_settings_text(const sh_ps_config *cfg, char *buf, size_t nbytes);

/* 1bit over a parameter server: its shards cut across layers, so the entries are quantised
 * in groups of this many (each with its own two values). */
#define SH_PS_1BIT_GROUP 1024

/* The compressor (options) a shard of count floats uses on both sides. */
shoal_result sh_ps_shard_compressor(const sh_ps_config *cfg, size_t count, shoal_compressor **out);
/* The codec's two words in a push header (pad[0], pad[1]). */
void sh_ps_codec_words(const sh_ps_config *cfg, int32_t words[2]);

/* Shard k of the vector: [*lo, *lo + *count). */
void sh_ps_shard(size_t nparams, int nservers, int k, size_t *lo, size_t *count);

/* ---- server ---- */
typedef struct sh_ps_server sh_ps_server;

typedef struct {
    int64_t pulls, pushes, refused, deferred_pulls;
    int64_t ssp_violations; /* pulls served although the slowest live worker was > s behind */
    int64_t late_pushes;    /* quorum: pushes that came after their round closed */
    int64_t max_spread;     /* the largest fastest-minus-slowest clock seen at a pull */
    int dropped_workers;
    double pushed_mb, cpu_s; /* payload received; CPU time of the server process */
} sh_ps_stats;

/* init_params: the whole vector (every server takes its shard from it). */
shoal_result sh_ps_server_create(shoal_comm *c, const sh_ps_config *cfg, const float *init_params,
                                 sh_ps_server **out);
/* Serve until every worker has said goodbye or was dropped. A worker is lost when it is
 * silent for timeout_ms, or at once (within 100 ms) when its process or link is gone
 * (shoal_peer_check): async and ssp drop it and go on; in sync mode it stops the job: the
 * others are told, and this returns SHOAL_ERR_PEER naming it. A
 * goodbye is answered once every lower worker has said goodbye or was dropped, naming the
 * lead: the lowest worker not dropped. */
shoal_result sh_ps_server_run(sh_ps_server *s);
void sh_ps_server_stats(const sh_ps_server *s, sh_ps_stats *out);
/* This server's view of every worker's clock (pushes it has taken from it), as one line:
 *   "ps server 0: clocks w0=120 w1=118 w2=121 w3=97 (dropped), spread 3 (slowest w1)"
 * Workers are numbered from 0 (worker w is rank nservers + w). Dropped workers and those
 * that said goodbye ("(done)") are left out of the spread, the fastest minus the slowest
 * clock, unless no other worker is left, when the spread is over the finished ones; in ssp
 * mode it never passes staleness + 1. The line (no newline) is cut to fit nbytes; returns
 * its length. */
size_t sh_ps_server_clock_line(const sh_ps_server *s, char *buf, size_t nbytes);
const float *sh_ps_server_params(const sh_ps_server *s, size_t *lo, size_t *count);
void sh_ps_server_destroy(sh_ps_server *s);

/* ---- worker ---- */
typedef struct sh_ps_client sh_ps_client;

shoal_result sh_ps_client_create(shoal_comm *c, const sh_ps_config *cfg, sh_ps_client **out);
/* The whole vector, as fresh as the consistency mode requires for this worker's clock.
 * SHOAL_ERR_TIMEOUT naming the servers after one SHOAL_TIMEOUT without a word from one
 * (a server holding the pull says so every quarter timeout); SHOAL_ERR_PEER within 100 ms
 * naming a server whose process or link is gone. */
shoal_result sh_ps_client_pull(sh_ps_client *w, float *params);
/* Gradients of the whole vector (averaged over this worker's batch); the clock advances.
 * SHOAL_ERR_PEER at once when a server is gone. */
shoal_result sh_ps_client_push(sh_ps_client *w, const float *grads);
/* SHOAL_ERR_PEER naming the first server whose process or link is gone (shoal_peer_check;
 * a frozen one looks alive), ending with `what` (what this worker cannot do now); never
 * blocks. */
shoal_result sh_ps_client_check_servers(sh_ps_client *w, const char *what);
/* The same, and in sync mode the other workers too (a round cannot end without each). */
shoal_result sh_ps_client_check_job(sh_ps_client *w, const char *what);
int64_t sh_ps_client_clock(const sh_ps_client *w);
/* The fewest rounds of updates the servers had made at the last pull: with a quorum, the
 * job's steps (a late worker skips to them). */
int64_t sh_ps_client_rounds(const sh_ps_client *w);
/* Bytes pushed so far (headers included) and the norm of the pushes' residuals now. */
void sh_ps_client_push_stats(const sh_ps_client *w, double *pushed_nbytes, double *residual_norm);
/* The error-feedback residuals of this worker's pushes (the per-shard compressors' state,
 * shard after shard): floats in all, 0 without a codec that keeps them (fp16, bf16, none,
 * or error feedback off). get copies them into out; set copies them from in, or with in
 * NULL starts them from zero. A checkpoint keeps them so a resume continues the pushes. */
size_t sh_ps_client_state_count(const sh_ps_client *w);
void sh_ps_client_state_get(sh_ps_client *w, float *out);
void sh_ps_client_state_set(sh_ps_client *w, const float *in);
/* The lead as this worker last heard it from the servers (0 before any answer): the lowest
 * worker index no server has dropped. The lead prints progress and reports. */
int sh_ps_client_lead(const sh_ps_client *w);
/* Say goodbye to every server (they stop when all workers have) and wait for their answer,
 * which settles the lead: it comes once every lower worker has said goodbye or was dropped
 * (SHOAL_ERR_TIMEOUT after one SHOAL_TIMEOUT without a word from a server). */
shoal_result sh_ps_client_close(sh_ps_client *w);
/* Say goodbye without waiting for the answer: a worker that gives up. */
void sh_ps_client_leave(sh_ps_client *w);
void sh_ps_client_destroy(sh_ps_client *w);

#endif
