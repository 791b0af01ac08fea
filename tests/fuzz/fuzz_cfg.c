/* fuzz_cfg.c — libFuzzer target: arbitrary text through the .cfg parser (src/nn/cfg.c), and
 * through building a network from it (src/nn/net.c, net_config.c, layer_*.c) when every
 * number in the text is small enough that the net stays tiny.
 * Not here: running the net. Driven by scripts/fuzz.sh (clang) and tests/fuzz/test_fuzz_cfg.c. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cfg.h"
#include "nn/net.h"

/* Sizes in the text at most this (and the text at most FUZZ_CFG_BUILD_NBYTES long): a net
 * built from it is a few MB at worst, so the fuzzer explores shapes, not the allocator. */
enum { FUZZ_CFG_MAX_NUMBER = 32, FUZZ_CFG_BUILD_NBYTES = 2048 };

static int numbers_small(const char *t)
{
    for (const char *p = t; *p;) {
        if (*p >= '0' && *p <= '9') {
            long v = 0;
            while (*p >= '0' && *p <= '9') {
                v = v * 10 + (*p - '0');
                if (v > FUZZ_CFG_MAX_NUMBER) return 0;
                p++;
            }
        } else {
            p++;
        }
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    sh_cfg *cfg = NULL;
    if (sh_cfg_parse(text, "fuzz.cfg", &cfg) == SHOAL_OK) {
        (void)sh_cfg_hash(cfg);
        if (size <= FUZZ_CFG_BUILD_NBYTES && numbers_small(text)) {
            sh_net *net = NULL;
            if (sh_net_create(cfg, 2, 1, &net) == SHOAL_OK) sh_net_destroy(net);
        }
        sh_cfg_destroy(cfg);
    }
    free(text);
    return 0;
}
