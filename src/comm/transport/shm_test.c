/* shm_test.c — hooks for the tests' fork harness (tests/lib/ranks.c): a segment made
 * before fork (anonymous shared memory) and each rank's shared-memory links attached to it
 * after, with no store.
 * Not here: the real connection through the store (shm.c).
 * Proved by tests/comm/test_transport_shm.c and every test that runs ranks over shm. */
#include <stdlib.h>
#include <sys/mman.h>

#include "comm/transport/shm.h"
#include "comm/transport/shm_seg.h"

typedef struct {
    void *base;
    int world;
} test_state;

int sh_shm_test_prepare(int world, void **state)
{
    test_state *t = malloc(sizeof *t);
    if (!t) return -1;
    t->world = world;
    t->base = mmap(NULL, segment_nbytes(world, COLL_RING_NBYTES), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (t->base == MAP_FAILED) {
        free(t);
        return -1;
    }
    seg_head_init(t->base, world, COLL_RING_NBYTES);
    *state = t;
    return 0;
}

int sh_shm_test_attach(void *state, shoal_comm *c)
{
    test_state *t = state;
    int *local = malloc(sizeof(int) * (size_t)t->world);
    unsigned char *want = malloc((size_t)t->world);
    if (!local || !want) return -1;
    for (int i = 0; i < t->world; i++) {
        local[i] = i;
        want[i] = 1;
        sh_link_close(c->coll[i]);
        sh_link_close(c->p2p[i]);
        c->coll[i] = c->p2p[i] = NULL;
    }
    int rc = sh_shm_make_links(c, t->base, t->world, local, NULL, want) == SHOAL_OK ? 0 : -1;
    free(local);
    free(want);
    return rc;
}

void sh_shm_test_release(void *state)
{
    test_state *t = state;
    munmap(t->base, segment_nbytes(t->world, COLL_RING_NBYTES));
    free(t);
}
