/* forward_check.c — bench/caffe/forward.sh's C side: build a .prototxt net, read its
 * .caffemodel, run forward on input.bin and print the largest differences from PyTorch's
 * expected.bin (logits relative to max(1, |ref|), probabilities absolute) and the time.
 * usage: forward_check NET.prototxt NET.caffemodel input.bin expected.bin */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/util.h"
#include "nn/caffe/caffe.h"
#include "nn/layer.h"
#include "nn/net.h"

static float *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *v = malloc((size_t)size + 4);
    *n = fread(v, 1, (size_t)size, f) / sizeof(float);
    fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: forward_check NET.prototxt NET.caffemodel input.bin expected.bin\n");
        return 2;
    }
    sh_net *net = NULL;
    if (sh_net_load(argv[1], 0, 1, &net) != SHOAL_OK || sh_caffe_weights_load(net, argv[2]) != SHOAL_OK) {
        fprintf(stderr, "forward_check: %s\n", shoal_last_error_message());
        return 1;
    }
    sh_net_set_threads(net, 1);
    size_t nx = 0, nref = 0;
    float *x = slurp(argv[3], &nx), *ref = slurp(argv[4], &nref);
    int nimg = sh_net_batch(net), k = sh_net_nclasses(net);
    if (!x || !ref || nref != 2 * (size_t)nimg * (size_t)k) {
        fprintf(stderr, "forward_check: inputs do not fit the net\n");
        return 1;
    }
    uint64_t t0 = sh_now_ns();
    if (sh_net_forward(net, x, nimg, 0) != SHOAL_OK) return 1;
    double ms = (double)(sh_now_ns() - t0) * 1e-6;
    const float *logits = sh_net_layer(net, sh_net_nlayers(net) - 2)->out, *prob = sh_net_output(net);
    double wl = 0, wp = 0;
    for (size_t i = 0; i < (size_t)nimg * (size_t)k; i++) {
        wl = fmax(wl, fabs(logits[i] - ref[i]) / fmax(1.0, fabs(ref[i])));
        wp = fmax(wp, fabs(prob[i] - ref[(size_t)nimg * k + i]));
    }
    printf("%s: %d images, %d classes, logits within %.3g, probabilities within %.3g, forward %.1f ms: %s\n", argv[1],
           nimg, k, wl, wp, ms, wl < 1e-4 && wp < 1e-4 ? "PASS" : "FAIL");
    free(x);
    free(ref);
    sh_net_destroy(net);
    return wl < 1e-4 && wp < 1e-4 ? 0 : 1;
}
