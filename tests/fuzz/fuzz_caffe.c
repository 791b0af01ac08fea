/* fuzz_caffe.c — libFuzzer target: arbitrary bytes as Caffe's files. First byte even: the
 * rest is a .prototxt read through the text reader and the mapping onto shoal's layers
 * (src/nn/caffe/prototxt.c, caffe_net.c, caffe_layers.c), built into a net when its numbers
 * are small; odd: the rest is a .caffemodel read into a small fixed net (caffe_model.c,
 * protobuf-c). Both go through files (the readers take paths), one per process.
 * Not here: running the net. Driven by scripts/fuzz.sh (clang) and tests/fuzz/test_fuzz_caffe.c. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/caffe/caffe.h"
#include "nn/cfg.h"
#include "nn/net.h"

enum { FUZZ_CAFFE_MAX_NUMBER = 32, FUZZ_CAFFE_BUILD_NBYTES = 4096 };

static const char fixed_net[] =
    "layer { name: \"data\" type: \"Input\" top: \"data\" input_param { shape { dim: 1 dim: 2 dim: 6 dim: 6 } } }\n"
    "layer { name: \"c1\" type: \"Convolution\" bottom: \"data\" top: \"c1\" convolution_param { num_output: 4 "
    "kernel_size: 3 } }\n"
    "layer { name: \"c1_bn\" type: \"BatchNorm\" bottom: \"c1\" top: \"c1\" }\n"
    "layer { name: \"c1_sc\" type: \"Scale\" bottom: \"c1\" top: \"c1\" scale_param { bias_term: true } }\n"
    "layer { name: \"fc\" type: \"InnerProduct\" bottom: \"c1\" top: \"fc\" inner_product_param { num_output: 5 } }\n"
    "layer { name: \"p\" type: \"Softmax\" bottom: \"fc\" top: \"p\" }\n";

static int small_numbers(const uint8_t *p, size_t n)
{
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] >= '0' && p[i] <= '9') {
            v = v * 10 + (p[i] - '0');
            if (v > FUZZ_CAFFE_MAX_NUMBER) return 0;
        } else {
            v = 0;
        }
    }
    return 1;
}

static char proto[64], model[64], net_path[64];

static void remove_files(void)
{
    unlink(proto);
    unlink(model);
    unlink(net_path);
}

static void put(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (size) fwrite(data, 1, size, f);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sh_net *net;
    if (!proto[0]) {
        atexit(remove_files);
        snprintf(proto, sizeof proto, "/tmp/fuzz_caffe_%d.prototxt", (int)getpid());
        snprintf(model, sizeof model, "/tmp/fuzz_caffe_%d.caffemodel", (int)getpid());
        snprintf(net_path, sizeof net_path, "/tmp/fuzz_caffe_%d_net.prototxt", (int)getpid());
        put(net_path, (const uint8_t *)fixed_net, sizeof fixed_net - 1);
        sh_cfg *cfg = NULL;
        if (sh_cfg_load(net_path, &cfg) == SHOAL_OK) (void)sh_net_create_owning(cfg, 1, 1, &net);
    }
    if (size == 0) return 0;
    if ((data[0] & 1) == 0) {
        put(proto, data + 1, size - 1);
        sh_cfg *cfg = NULL;
        if (sh_cfg_load(proto, &cfg) == SHOAL_OK) {
            sh_net *n = NULL;
            if (size <= FUZZ_CAFFE_BUILD_NBYTES && small_numbers(data + 1, size - 1) &&
                sh_net_create(cfg, 1, 1, &n) == SHOAL_OK)
                sh_net_destroy(n);
            sh_cfg_destroy(cfg);
        }
    } else if (net) {
        put(model, data + 1, size - 1);
        (void)sh_caffe_weights_load(net, model);
    }
    return 0;
}
