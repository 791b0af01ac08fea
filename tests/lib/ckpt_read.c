/* ckpt_read.c — a checkpoint's section read back for a test (see ckpt_read.h).
 * Not here: writing checkpoints (src/io/checkpoint.c).
 * Used by the tests that compare runs' checkpoints; proved through them. */
#include "ckpt_read.h"

#include <stdio.h>
#include <stdlib.h>

#include "io/checkpoint.h"
#include "nn/net.h"
#include "shoal/result.h"

float *sh_test_ckpt_section(const char *dir, const char *cfg, const char *file, const char *name, size_t *count)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, cfg);
    sh_net *net = NULL;
    if (sh_net_load(path, 0, 1, &net) != SHOAL_OK) return NULL;
    *count = sh_net_nparams(net);
    sh_net_destroy(net);
    float *p = malloc(*count * sizeof(float) + 1);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    sh_ckpt_section s = {name, p, *count * sizeof(float)};
    if (!p || sh_ckpt_load(path, &s, 1) != SHOAL_OK) {
        free(p);
        return NULL;
    }
    return p;
}
