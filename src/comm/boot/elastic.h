/* elastic.h — an elastic job's generations: who is in each (members), how a new one is
 * agreed on through the job's store (arrivals, one decider, the closed list), and the
 * communicator's side (elastic.c: the first generation, joining, shoal_comm_regroup).
 * Not here: links (transport/), what a member's progress means (src/train/elastic.c).
 * Proved by tests/comm/test_elastic.c. */
#ifndef SH_ELASTIC_H
#define SH_ELASTIC_H

#include <stddef.h>
#include <stdint.h>

#include "comm/boot/store.h"
#include "comm/comm_internal.h"

/* One process of a generation, as it announced itself on the store. */
typedef struct {
    int job_rank;             /* its launcher's rank */
    uint64_t id;              /* random, the process's (comm proc_id) */
    int pid;
    int64_t progress;         /* what it brings (the training's last complete step); -1: none */
    int joiner;               /* 1: it was not a member of the last generation */
    int secure;               /* SHOAL_SECURE */
    char cand_host[128];      /* its store server: where the job's store may move */
    int cand_port;
    char hostname[128];
    char hostid[300];
} sh_member;

/* "job_rank id pid progress joiner secure cand_host cand_port hostname hostid": one line.
 * Spaces in names are written as '_'. Returns the length (truncated to cap - 1). */
int sh_member_format(const sh_member *m, char *buf, size_t cap);
/* SHOAL_ERR_FORMAT for a line that is not one. */
shoal_result sh_member_parse(const char *line, sh_member *m);

/* Announce m at generation gen's list (members "e<gen>/a", joiners "e<gen>/j", by
 * m->joiner); *index: its place in that list (0: the first member, who decides). */
shoal_result sh_elastic_arrive(sh_store *s, int64_t gen, const sh_member *m, int *index);

typedef struct {
    const sh_member *old;     /* the last generation's members, in rank order */
    int nold;
    const sh_member *me;      /* the decider (its host, secure) */
    int primary;              /* 1: this store is where the last generation formed */
    int min_world, max_world;
    int settle_ms, timeout_ms;
    const char *key;          /* the job key (a member's store proves it's alive) */
    /* What looking for the store found already, per member (NULL: nothing): 0 not tried or it
     * answered, else the result of trying its store (SHOAL_ERR_PEER: refused, lost; others: no
     * answer), so that it is not probed again. */
    const shoal_result *tried;
} sh_decide_opts;

/* The first member to arrive names generation gen's members once for all ("e<gen>/closed"):
 * it waits until every member of the last generation that may still come has come (a
 * member whose store refuses connections, or whose process on this host is gone, is lost;
 * one that cannot be reached, or whose store takes a connection but does not answer (a
 * frozen process), will not come), or settle_ms pass without a new arrival
 * (timeout_ms in all); joiners then fill up to max_world. Fewer than min_world, or too
 * few of the last generation to be sure the others are lost (a majority; half at the store
 * where it formed), closes it as stopped, with the reason every member will give. */
shoal_result sh_elastic_decide(sh_store *s, int64_t gen, const sh_decide_opts *o);

/* Wait up to timeout_ms for generation gen's list: *list (malloc'ed, in rank order), *n.
 * A stopped generation: SHOAL_ERR_PEER with its reason. */
shoal_result sh_elastic_wait_closed(sh_store *s, int64_t gen, int timeout_ms, int *primary, sh_member **list,
                                    int *n);

/* Why a joiner that is not on generation gen's list was left out ("the job has its
 * maximum of 4 ranks"), when the decider said; 0 when it did not. */
int sh_elastic_refusal(sh_store *s, int64_t gen, uint64_t id, char *why, size_t cap);

/* ---- the communicator's side (elastic.c) ---- */
typedef struct sh_elastic sh_elastic;
/* The first generation, before the links: this process's store and record (every rank
 * but 0, whose store is the job's). Collective with sh_elastic_started. */
shoal_result sh_elastic_begin(shoal_comm *c, const shoal_comm_opts *o);
/* After the ready barrier: every member's record; rank 0 marks the job as running. */
shoal_result sh_elastic_started(shoal_comm *c);
/* A process that found the job running (boot.c, *joining): wait to be taken in at its next
 * regroup. skel (store and options only) is consumed. */
shoal_result sh_elastic_join(const shoal_comm_opts *o, shoal_comm *skel, shoal_comm **out);
void sh_elastic_free(sh_elastic *e); /* NULL is fine; stops this process's stores */

#endif
