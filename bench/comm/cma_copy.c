/* cma_copy.c — what a copy through the kernel (process_vm_readv / process_vm_writev, the
 * copies of shoal's large one-host allreduce in src/comm/coll/cma.c) costs against memcpy
 * and a reduction in user space, on 8 MiB read or written in 256 KiB pieces.
 * Not here: the allreduce itself (bench/comm/run.sh, bench/python/allreduce.py).
 *   cc -O3 -march=native bench/comm/cma_copy.c -o /tmp/cma_copy && /tmp/cma_copy [MiB] [piece KiB]
 * Best of 30 passes each, interleaved; pages of 2 MiB and of 4 KiB (starting 16 bytes into a
 * page, as numpy's arrays do), the peer a forked child holding the same pages. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { PASSES = 30, HUGE_NBYTES = 2 << 20 };

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* nbytes of memory written once: on 2 MiB pages (huge) or 4 KiB pages 16 bytes in. */
static unsigned char *region(size_t nbytes, int huge)
{
    size_t map = nbytes + 2 * HUGE_NBYTES;
    unsigned char *m = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("cma_copy: mmap");
        exit(1);
    }
    unsigned char *p = huge ? (unsigned char *)(((size_t)m + HUGE_NBYTES - 1) & ~(size_t)(HUGE_NBYTES - 1)) : m + 16;
    madvise(huge ? p : m, huge ? nbytes : map, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memset(p, 1, nbytes);
    return p;
}

/* The whole region in pieces through process_vm_readv (write 0) or _writev (write 1). */
static double through_kernel(pid_t peer, unsigned char *local, unsigned char *remote, size_t nbytes, size_t piece,
                             int write)
{
    double t0 = now_s();
    for (size_t off = 0; off < nbytes; off += piece) {
        struct iovec l = {local, piece}, r = {remote + off, piece};
        ssize_t n = write ? process_vm_writev(peer, &l, 1, &r, 1, 0) : process_vm_readv(peer, &l, 1, &r, 1, 0);
        if (n != (ssize_t)piece) {
            perror("cma_copy: process_vm_readv/writev (ptrace rules may forbid it)");
            exit(1);
        }
    }
    return now_s() - t0;
}

static double user_copy(unsigned char *piece_buf, unsigned char *src, size_t nbytes, size_t piece, int write)
{
    double t0 = now_s();
    for (size_t off = 0; off < nbytes; off += piece)
        if (write) memcpy(src + off, piece_buf, piece);
        else memcpy(piece_buf, src + off, piece);
    return now_s() - t0;
}

/* dst[i] = a[i] + b[i] over the region, the piece of b reused (as cma.c's scratch). */
static double user_reduce(float *dst, const float *a, const float *b, size_t nbytes, size_t piece)
{
    double t0 = now_s();
    size_t n = piece / sizeof(float);
    for (size_t off = 0; off < nbytes / sizeof(float); off += n)
        for (size_t i = 0; i < n; i++) dst[off + i] = a[off + i] + b[i];
    return now_s() - t0;
}

int main(int argc, char **argv)
{
    size_t nbytes = (size_t)(argc > 1 ? atol(argv[1]) : 8) << 20, piece = (size_t)(argc > 2 ? atol(argv[2]) : 256) << 10;
    if (!nbytes || !piece || nbytes % piece) {
        fprintf(stderr, "cma_copy: the size (MiB) must be a multiple of the piece (KiB)\n");
        return 2;
    }
    unsigned char *mem[2] = {region(nbytes, 1), region(nbytes, 0)};
    unsigned char *out = region(nbytes, 1);
    pid_t peer = fork();
    if (peer == 0) { /* holds the same pages until killed */
        pause();
        _exit(0);
    }
    unsigned char *buf = aligned_alloc(4096, piece);
    memset(buf, 2, piece);
    double best[2][5];
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 5; k++) best[h][k] = 1e9;
    for (int pass = 0; pass < PASSES; pass++)
        for (int h = 0; h < 2; h++) {
            double t[5] = {through_kernel(peer, buf, mem[h], nbytes, piece, 0),
                           through_kernel(peer, buf, mem[h], nbytes, piece, 1),
                           user_copy(buf, mem[h], nbytes, piece, 0), user_copy(buf, mem[h], nbytes, piece, 1),
                           user_reduce((float *)out, (const float *)mem[h], (const float *)buf, nbytes, piece)};
            for (int k = 0; k < 5; k++)
                if (t[k] < best[h][k]) best[h][k] = t[k];
        }
    kill(peer, SIGKILL);
    waitpid(peer, NULL, 0);
    printf("%zu MiB in %zu KiB pieces, best of %d (us; GB/s of bytes moved)\n", nbytes >> 20, piece >> 10, PASSES);
    printf("| pages | process_vm_readv | process_vm_writev | memcpy in | memcpy out | reduce (a+b) "
           "| readv / memcpy |\n|---|---:|---:|---:|---:|---:|---:|\n");
    for (int h = 0; h < 2; h++) {
        printf("| %s |", h ? "4 KiB, +16 B" : "2 MiB");
        for (int k = 0; k < 5; k++) printf(" %.1f (%.1f) |", best[h][k] * 1e6, (double)nbytes / best[h][k] / 1e9);
        printf(" %.2fx |\n", best[h][0] / best[h][2]);
    }
    return 0;
}
