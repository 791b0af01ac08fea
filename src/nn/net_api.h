/* net_api.h — what the rest of the library needs of a public net handle (shoal/net.h): the
 * internal net inside it, for the public calls that live beside their module
 * (shoal_net_load_weights in src/train/eval_api.c reads checkpoints).
 * Not here: the public calls (net_api.c). Proved by tests/train/test_api.c. */
#ifndef SH_NET_API_H
#define SH_NET_API_H

#include "nn/net.h"
#include "shoal/net.h"

/* The internal net of n; NULL for a NULL or destroyed handle. */
sh_net *sh_net_api_inner(shoal_net *n);

#endif
