/* transport_tcp.c — the TCP mesh: listen, publish, connect to lower ranks, accept higher
 * ones, each connection proving the job key and saying who it is.
 * Not here: the handshake (net.c), byte moving (link.c).
 * Proved by tests/comm/test_comm.c and tests/comm/test_comm_faults.c. */
#include "comm/transport_tcp.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/env.h"
#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/boot.h"
#include "comm/net.h"
#include "comm/store.h"

static void context(const shoal_comm *c, int from, int to, int plane, char *out, size_t cap)
{
    snprintf(out, cap, "%.40s tcp %d->%d plane %d", c->prefix, from, to, plane);
}

static shoal_result job_key(char *out, size_t cap)
{
    sh_boot_env e;
    SH_TRY(sh_boot_read_env(NULL, &e));
    snprintf(out, cap, "%s", e.job_key);
    return SHOAL_OK;
}

shoal_result sh_tcp_connect(shoal_comm *c, const unsigned char *want)
{
    int need_in = 0, any = 0;
    for (int p = 0; p < c->world; p++)
        if (p != c->rank && want[p]) {
            any = 1;
            if (p > c->rank) need_in += 2;
        }
    char key[640];
    SH_TRY(job_key(key, sizeof key));
    uint64_t dl = sh_net_deadline(c->timeout_ms);
    int lfd = -1, port = 0;
    char addr[64] = "", skey[128];
    if (any) {
        long ba = 0;
        SH_TRY(sh_env_long("SHOAL_BIND_ALL", &ba));
        sh_boot_env e;
        SH_TRY(sh_boot_read_env(NULL, &e));
        SH_TRY(sh_net_local_addr(e.master_addr, addr, sizeof addr));
        SH_TRY(sh_net_listen(ba ? NULL : addr, 0, &lfd, &port));
        char v[96];
        int n = snprintf(v, sizeof v, "%s:%d", addr, port);
        snprintf(skey, sizeof skey, "%s/tcp/%d", c->prefix, c->rank);
        shoal_result rc = sh_store_set(c->store, skey, v, (size_t)n);
        if (rc != SHOAL_OK) {
            close(lfd);
            return rc;
        }
    }
    shoal_result rc = SHOAL_OK;
    /* Connect to every lower rank we want, twice. */
    for (int p = 0; p < c->rank && rc == SHOAL_OK; p++) {
        if (!want[p]) continue;
        char v[96];
        size_t vn = 0;
        snprintf(skey, sizeof skey, "%s/tcp/%d", c->prefix, p);
        rc = sh_store_get(c->store, skey, v, sizeof v - 1, &vn, c->timeout_ms);
        if (rc != SHOAL_OK) break;
        v[vn < sizeof v ? vn : sizeof v - 1] = 0;
        char *colon = strrchr(v, ':');
        if (!colon) {
            rc = SH_FAIL(SHOAL_ERR_PEER, "rank %d published a bad address \"%s\"", p, v);
            break;
        }
        *colon = 0;
        int pport = atoi(colon + 1);
        for (int plane = 0; plane < 2 && rc == SHOAL_OK; plane++) {
            int fd = -1;
            rc = sh_net_connect(v, pport, dl, &fd);
            if (rc == SHOAL_OK) {
                char ctx[SH_AUTH_CTX_NBYTES];
                context(c, c->rank, p, plane, ctx, sizeof ctx);
                rc = sh_auth_client(fd, key, ctx, dl);
                if (rc == SHOAL_OK) rc = sh_link_fd_create(fd, p, plane ? &c->p2p[p] : &c->coll[p]);
                if (rc != SHOAL_OK) close(fd);
            }
            if (rc != SHOAL_OK) {
                char pb[128];
                sh_err_prefix("connecting to %s at %s:%d: ", sh_comm_peer_name(c, p, pb, sizeof pb), v, pport);
            }
        }
    }
    /* Accept the higher ranks; strangers are logged and dropped. */
    while (rc == SHOAL_OK && need_in > 0) {
        uint64_t now = sh_now_ns();
        if (now >= dl) {
            char missing[256] = "";
            size_t len = 0;
            for (int p = c->rank + 1; p < c->world && len < sizeof missing - 8; p++)
                if (want[p] && (!c->coll[p] || !c->p2p[p]))
                    len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d", len ? ", " : "", p);
            rc = SH_FAIL(SHOAL_ERR_TIMEOUT, "ranks %s never connected within %d ms", missing, c->timeout_ms);
            break;
        }
        struct pollfd pf = {lfd, POLLIN, 0};
        int left = (int)((dl - now) / 1000000ull) + 1;
        if (poll(&pf, 1, left > 200 ? 200 : left) <= 0) continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) continue;
        sh_net_tune(fd);
        char ctx[SH_AUTH_CTX_NBYTES], who[64];
        sh_net_peer_str(fd, who, sizeof who);
        uint64_t adl = sh_now_ns() + 3000000000ull < dl ? sh_now_ns() + 3000000000ull : dl;
        if (sh_auth_server(fd, key, ctx, adl) != SHOAL_OK) {
            SH_LOG_W("comm", "refused a connection from %s: %s", who, shoal_last_error_message());
            close(fd);
            continue;
        }
        int from = -1, to = -1, plane = -1;
        char pre[64];
        if (sscanf(ctx, "%63s tcp %d->%d plane %d", pre, &from, &to, &plane) != 4 ||
            strcmp(pre, c->prefix) != 0 || to != c->rank || from <= c->rank || from >= c->world ||
            !want[from] || plane < 0 || plane > 1 || (plane ? c->p2p[from] : c->coll[from])) {
            SH_LOG_W("comm", "refused a connection from %s: unexpected \"%s\"", who, ctx);
            close(fd);
            continue;
        }
        rc = sh_link_fd_create(fd, from, plane ? &c->p2p[from] : &c->coll[from]);
        need_in--;
    }
    if (lfd >= 0) close(lfd);
    return rc;
}
