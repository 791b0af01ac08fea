/* sock_cc.c — the congestion control of shoal's TCP connections (SHOAL_TCP_CONGESTION): the
 * kernel's default unless the variable names another (why one would: docs/comm.md).
 * Not here: the rest of a socket's tuning and its deadlines (sock.c).
 * Proved by tests/comm/test_transport_tcp.c and test_net_faults.c (a link back up). */
#include "comm/boot/sock.h"

#include <errno.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/env.h"
#include "base/err.h"

enum { CC_NAME_MAX = 16 }; /* the kernel's TCP_CA_NAME_MAX */
static pthread_once_t cc_once = PTHREAD_ONCE_INIT;
static char cc_name[CC_NAME_MAX]; /* SHOAL_TCP_CONGESTION's algorithm, or "": the kernel's */

static void read_cc(void)
{
    const char *v = sh_env_str("SHOAL_TCP_CONGESTION");
    if (v && *v && strcmp(v, "system") != 0) snprintf(cc_name, sizeof cc_name, "%s", v);
}

static int set_cc(int fd, const char *name)
{
    return setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name));
}

void sh_sock_tune_cc(int fd)
{
    pthread_once(&cc_once, read_cc);
    if (cc_name[0]) set_cc(fd, cc_name); /* checked once by sh_sock_check_congestion */
}

shoal_result sh_sock_check_congestion(void)
{
    pthread_once(&cc_once, read_cc);
    if (!cc_name[0]) return SHOAL_OK;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0) return SHOAL_OK; /* no TCP here: nothing to set */
    int rc = set_cc(fd, cc_name), err = errno;
    close(fd);
    if (rc == 0) return SHOAL_OK;
    char allowed[256] = "?";
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_allowed_congestion_control", "r");
    if (f) {
        if (!fgets(allowed, sizeof allowed, f)) snprintf(allowed, sizeof allowed, "?");
        allowed[strcspn(allowed, "\n")] = 0;
        fclose(f);
    }
    return SH_FAIL(SHOAL_ERR_INVALID,
                   "SHOAL_TCP_CONGESTION=%s: the kernel refuses it (%s); a process may choose from "
                   "net.ipv4.tcp_allowed_congestion_control (%s), or use \"system\" for the kernel's default",
                   cc_name, strerror(err), allowed);
}
