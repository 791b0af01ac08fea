/* ps/server_state.h — one parameter server's state, shared by its two files: the messages and
 * workers (server.c) and the rounds that turn pushes into updates (server_rounds.c).
 * Not here: the server's API (ps/ps.h), the message layout (ps/proto.h).
 * Proved by tests/train/test_ps.c. */
#ifndef SH_PS_SERVER_STATE_H
#define SH_PS_SERVER_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "nn/optim.h"
#include "shoal/comm.h"
#include "train/ps/proto.h"
#include "train/ps/ps.h"

struct sh_ps_server {
    shoal_comm *c;
    sh_ps_config cfg;
    int k;                  /* this server's index */
    size_t lo, count;       /* its shard */
    unsigned char *reply;   /* a PARAMS header, then the shard: replies go out without a copy */
    unsigned char *reply_base; /* its allocation */
    float *params, *acc, *grad; /* params: inside reply */
    shoal_compressor *dec;  /* compressed pushes: decodes them into grad_in, else NULL */
    float *grad_in;
    sh_optim *opt;
    int nworkers;
    int novl;               /* workers whose ranges meet this shard (the others never come) */
    size_t *wa, *wn;        /* [w]: its range within the shard, from lo; wn 0: not here */
    int *seg;               /* [w]: its segment: workers with the same range (a part's replicas) */
    int nseg;
    size_t *seg_a, *seg_n;  /* [seg]: its range within the shard */
    int *seg_cover;         /* [seg]: workers holding it */
    int *seg_pushes;        /* [seg]: sync: pushes in the current round */
    int64_t *clock;         /* [w]: pushes applied or accumulated from worker w */
    int *alive, *bye, *pending;
    int *done_owed;         /* [w]: said goodbye, not yet answered with DONE */
    uint64_t hold_sent_ns;  /* when waiting pulls and goodbyes were last told to hold on */
    uint64_t *last_seen_ns;
    uint64_t *held_ns;      /* [w]: when its pull was held by the consistency bound, or 0 */
    int round_pushes;       /* sync: pushes accumulated for the current round */
    int round_fresh;        /* quorum: of them, from workers that pulled this round's weights */
    int64_t *pulled_at;     /* quorum, [w]: the rounds done when its last pull was answered */
    int *pushed_since;      /* quorum, [w]: it pushed since that pull */
    int64_t updates;        /* optimizer steps taken */
    unsigned char *buf;     /* messages land here (pushes are applied from it in place) */
    size_t buf_nbytes;
    shoal_request **inflight;
    int ninflight, cap_inflight;
    char *line;             /* the clock line, room for every worker */
    size_t line_nbytes;
    sh_ps_stats st;
};

/* server.c: send header h and payload to worker w without waiting; the lead worker (-1: none). */
void sh_ps_server_send_to(sh_ps_server *s, int w, const ps_hdr *h, const void *payload, size_t nbytes);
int sh_ps_server_lead_worker(const sh_ps_server *s);

/* server_rounds.c: answer every waiting pull the consistency mode allows now; apply worker w's
 * push g (its range of the shard); after an update, the round's checkpoint, clocks and hook;
 * the shard's checkpoint written (traced) and read back at resume. */
void sh_ps_rounds_serve_pulls(sh_ps_server *s);
void sh_ps_rounds_apply_push(sh_ps_server *s, int w, const float *g);
shoal_result sh_ps_rounds_after_update(sh_ps_server *s);
shoal_result sh_ps_rounds_save(sh_ps_server *s);
shoal_result sh_ps_rounds_load(sh_ps_server *s);

#endif
