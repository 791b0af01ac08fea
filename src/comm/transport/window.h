/* window.h — shared windows (window.c): their layout, and finding the window a buffer
 * lies in, for the CMA allreduce (coll/cma.c), which reads and writes windows in place.
 * Not here: the public calls (include/shoal/comm.h: shoal_window_*).
 * Proved by tests/comm/test_transport_shm.c and tests/comm/test_comm.c. */
#ifndef SH_COMM_WINDOW_H
#define SH_COMM_WINDOW_H

#include "comm/transport/shm.h"

struct shoal_window {
    shoal_comm *c;
    unsigned char *base;  /* this process's mapping, 2 MiB aligned */
    size_t nbytes;
    size_t common_nbytes, each_nbytes; /* as asked */
    size_t common_span, each_span;     /* rounded up to 2 MiB (4 KiB when /dev/shm is small): the layout */
    int id;               /* the same on every rank: windows are made in the same order */
    struct shoal_window *next;
};

/* The window holding [p, p + n), or NULL (compared as addresses: p may be any buffer). */
const shoal_window *sh_window_of(const struct sh_shm *s, const void *p, size_t n);
/* The window numbered id (the same number on every rank), or NULL. */
const shoal_window *sh_window_by_id(const struct sh_shm *s, int id);
/* 1 when [p, p + nbytes) lies in the common block of one of c's windows. */
int sh_window_common(const shoal_comm *c, const void *p, size_t nbytes);
/* Unmap and free every window of s (the segment's destruction). */
void sh_window_free_all(struct sh_shm *s);

#endif
