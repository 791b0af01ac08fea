/* store.h — the rendezvous store rank 0 runs (as torch.distributed's TCPStore): keys and
 * values over authenticated TCP; get waits until a key appears; atomic counters; barriers.
 * The server is store_server.c, the client store_client.c.
 * Not here: what the keys mean (boot.c, transport/, comm.c).
 * Proved by tests/comm/test_store.c. */
#ifndef SH_STORE_H
#define SH_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "shoal/result.h"

typedef struct sh_store sh_store;
typedef struct sh_store_server sh_store_server;

enum { SH_STORE_MAX_VALUE_NBYTES = 1 << 20 };

/* Serve on addr:port (addr NULL/"": every address). Connections must prove `key`; others
 * are logged and dropped, and the store goes on. world > 0: the job's size, against which
 * ranks' claims are checked (sh_store_claim; 0: no claims). strict: a second claim of a rank
 * stops the job even after every rank has come (the key is not secret: the first claimer
 * may be the stranger). */
shoal_result sh_store_server_start(const char *addr, int port, const char *key, int world, int strict,
                                   sh_store_server **out);
/* Why the job was stopped (a rank claimed twice, another world size), or NULL. Rank 0's
 * communicator asks before each operation; any thread. */
const char *sh_store_server_stopped(const sh_store_server *s);
int sh_store_server_port(const sh_store_server *s);
/* Stop serving and free. Blocks while other ranks still talk to the store (at most 5 s;
 * 0.5 s once they fall quiet), so rank 0 leaving first does not cut off the end of their
 * rendezvous. NULL is fine. */
void sh_store_server_stop(sh_store_server *s);

/* Connect (retrying until timeout_ms) and authenticate. Thread-safe afterwards. */
shoal_result sh_store_connect(const char *addr, int port, const char *key, int timeout_ms,
                              sh_store **out);
/* The same with one connection attempt: a store whose process is gone (refused) fails at
 * once, one that does not answer at timeout_ms (an elastic job looking for its store). */
shoal_result sh_store_connect_once(const char *addr, int port, const char *key, int timeout_ms,
                                   sh_store **out);
void sh_store_close(sh_store *s); /* NULL is fine */
/* What the client connected with: the job key (transports prove the same key) and the
 * store's host (transports listen on the interface that reaches it). */
const char *sh_store_job_key(const sh_store *s);
const char *sh_store_host(const sh_store *s);
int sh_store_port(const sh_store *s);

/* This process is rank `rank` of a job of `world` (who: "pid 123 on hostb", for messages).
 * Refused at once (SHOAL_ERR_MISMATCH naming both) when another process holds the rank or
 * the world differs from rank 0's; then, while not every rank has come (or for a strict
 * store, always), the job is stopped: every request of every rank fails with the reason. */
shoal_result sh_store_claim(sh_store *s, int rank, int world, uint64_t id, const char *who);
shoal_result sh_store_set(sh_store *s, const char *key, const void *val, size_t nbytes);
/* Wait until key exists (up to timeout_ms), copy up to cap bytes, *nbytes = its length. */
shoal_result sh_store_get(sh_store *s, const char *key, void *val, size_t cap, size_t *nbytes,
                          int timeout_ms);
shoal_result sh_store_add(sh_store *s, const char *key, int64_t delta, int64_t *after);
/* Every one of nranks callers with the same key returns once all have arrived. */
shoal_result sh_store_barrier(sh_store *s, const char *key, int nranks, int timeout_ms);
/* The same, as rank `rank`: a timeout names the ranks that did not come ("ranks 48-999"). */
shoal_result sh_store_barrier_named(sh_store *s, const char *key, int rank, int nranks, int timeout_ms);

#endif
