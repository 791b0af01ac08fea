/* darknet_train.c — the Darknet side of bench/engine/run.sh: trains a .cfg with Debian's
 * libdarknet (the library behind the `darknet` command) on Fashion-MNIST for a number of
 * batches and prints one JSON object with the steady-state images per second.
 * Why a program and not the `darknet` command: `darknet classifier train` decodes image
 * files (one PNG/JPEG per image, with augmentation) and `darknet cifar train` reads fixed
 * 32x32x3 CIFAR paths and saves weights to a hard-coded directory; neither trains 28x28 IDX
 * data. This calls the same training function those commands call (train_network).
 * Build: cc -O2 darknet_train.c -I/usr/lib/darknet/include -L/usr/lib/darknet -ldarknet \
 *        -Wl,-rpath,/usr/lib/darknet -lz -lm
 * Run:   darknet_train CFG DATADIR WARMUP_BATCHES BATCHES */
#include <darknet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <zlib.h>

static unsigned char *read_gz(const char *path, size_t *nbytes)
{
    gzFile f = gzopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    int got;
    while (buf && (got = gzread(f, buf + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    gzclose(f);
    *nbytes = n;
    return buf;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: darknet_train CFG DATADIR WARMUP_BATCHES BATCHES\n");
        return 2;
    }
    int warmup = atoi(argv[3]), batches = atoi(argv[4]);
    char path[4096];
    size_t ni = 0, nl = 0;
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", argv[2]);
    unsigned char *img = read_gz(path, &ni);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", argv[2]);
    unsigned char *lab = read_gz(path, &nl);
    if (!img || !lab || ni < 16 || nl < 8) {
        fprintf(stderr, "darknet_train: cannot read the IDX files in %s\n", argv[2]);
        return 1;
    }
    network *net = parse_network_cfg(argv[1]);
    int b = net->batch, in = net->inputs;
    int count = (int)(nl - 8);
    if ((size_t)count * (size_t)in + 16 > ni) {
        fprintf(stderr, "darknet_train: %s expects %d values per image\n", argv[1], in);
        return 1;
    }
    /* Batches are built in the order of the file: the data path is not what is timed. */
    int rows = (warmup + batches) * b;
    if (rows > count) rows = count / b * b;
    data d = {0};
    d.shallow = 0;
    d.X = make_matrix(rows, in);
    d.y = make_matrix(rows, 10);
    for (int r = 0; r < rows; r++) {
        for (int k = 0; k < in; k++) d.X.vals[r][k] = img[16 + (size_t)r * in + k] / 255.0f;
        d.y.vals[r][lab[8 + r]] = 1;
    }
    free(img);
    free(lab);
    float loss = 0;
    double t0 = 0;
    int done = 0;
    for (int k = 0; k < warmup + batches && (k + 1) * b <= rows; k++) {
        if (k == warmup) t0 = now_s();
        /* One batch as a shallow view of rows [k*b, (k+1)*b). */
        data part = d;
        part.shallow = 1;
        part.X.rows = part.y.rows = b;
        part.X.vals = d.X.vals + (size_t)k * b;
        part.y.vals = d.y.vals + (size_t)k * b;
        loss = train_network(net, part);
        if (k >= warmup) done++;
    }
    double secs = now_s() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"images_per_s\":%.1f,\"loss\":%.4f,\"batches\":%d,\"peak_rss_mb\":%.1f}\n",
           done * b / secs, loss, done, ru.ru_maxrss / 1024.0);
    return 0;
}
