/* net_api.h — the internal net inside a public shoal_net handle, for the public functions
 * that live outside src/nn (the weight files: src/train/net_weights.c).
 * Not here: the handle's checks (net_api.c).
 * Proved by tests/python/test_net.py (load and save through the handle). */
#ifndef SH_NET_API_H
#define SH_NET_API_H

#include "nn/net.h"
#include "shoal/net.h"

/* NULL for a NULL or destroyed handle. */
sh_net *sh_net_api_inner(const shoal_net *n);

#endif
