/* link.c — links over stream sockets (TCP, and the socketpairs of the tests' harness):
 * non-blocking sends and receives that report a lost peer, and closing any link.
 * Not here: shared-memory and MPI links (shm.c, mpi.c), connecting (tcp.c), the engine
 * that moves bytes on several links at once (xfer.c).
 * Proved by tests/comm/test_link.c. */
#include "comm/transport/link.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/err.h"

/* ---- stream-socket links ---- */

static ssize_t fd_send_some(sh_link *l, const void *buf, size_t nbytes)
{
    for (;;) {
        ssize_t n = send(l->fd, buf, nbytes, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        SH_FAIL(SHOAL_ERR_PEER, "connection lost (%s)", strerror(errno));
        return -1;
    }
}

static ssize_t fd_recv_some(sh_link *l, void *buf, size_t nbytes)
{
    for (;;) {
        ssize_t n = recv(l->fd, buf, nbytes, MSG_DONTWAIT);
        if (n > 0) return n;
        if (n == 0) {
            if (nbytes == 0) return 0;
            SH_FAIL(SHOAL_ERR_PEER, "connection closed by the peer");
            return -1;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        SH_FAIL(SHOAL_ERR_PEER, "connection lost (%s)", strerror(errno));
        return -1;
    }
}

static void fd_abort(sh_link *l, const char *reason)
{
    (void)reason;
    shutdown(l->fd, SHUT_RDWR);
}

static void fd_close(sh_link *l)
{
    close(l->fd);
    free(l);
}

static const sh_link_ops fd_ops = {
    .name = "tcp",
    .send_some = fd_send_some,
    .recv_some = fd_recv_some,
    .recv_peek = NULL,
    .recv_consume = NULL,
    .abort = fd_abort,
    .close = fd_close,
};

shoal_result sh_link_fd_create(int fd, int peer, sh_link **out)
{
    *out = NULL;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return SH_FAIL(SHOAL_ERR_IO, "cannot make socket non-blocking: %s", strerror(errno));
    sh_link *l = calloc(1, sizeof *l);
    if (!l) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory for a link");
    l->ops = &fd_ops;
    l->peer = peer;
    l->fd = fd;
    *out = l;
    return SHOAL_OK;
}

void sh_link_close(sh_link *l)
{
    if (l) l->ops->close(l);
}
