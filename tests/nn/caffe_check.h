/* caffe_check.h — helpers of the Caffe tests: a temporary directory, files written into it,
 * tests/nn/caffe_torch.py run there (python3-protobuf, protoc, PyTorch), and a model built
 * from a .prototxt in it. Static functions only; included by tests/nn/test_caffe_*.c. */
#ifndef SH_CAFFE_CHECK_H
#define SH_CAFFE_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "check.h"
#include "lib/run.h"
#include "nn/caffe/caffe.h"
#include "nn/cfg.h"
#include "nn/net.h"

static char cc_dir[64];

static inline void cc_mkdir(void)
{
    snprintf(cc_dir, sizeof cc_dir, "/tmp/shoal_caffe_XXXXXX");
    if (!mkdtemp(cc_dir)) fprintf(stderr, "mkdtemp failed\n");
}

static inline void cc_rmdir(void)
{
    char cmd[128], out[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cc_dir);
    (void)sh_test_run(cmd, out, sizeof out);
}

/* cc_dir/name, written with text; returns the path (static buffer, one at a time). */
static inline const char *cc_write(const char *name, const char *text)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", cc_dir, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return path;
}

static inline int cc_have(const char *what)
{
    char cmd[256], out[64];
    snprintf(cmd, sizeof cmd, "%s 2>/dev/null && echo yes", what);
    return sh_test_run(cmd, out, sizeof out) == 0 && !strncmp(out, "yes", 3);
}

/* python3 with torch and protobuf, and protoc: the reference side. */
static inline int cc_have_reference(void)
{
    return cc_have("/usr/bin/python3 -c 'import torch, google.protobuf'") && cc_have("protoc --version >/dev/null");
}

/* tests/nn/caffe_torch.py ARGS; its output in out. */
static inline int cc_python(const char *args, char *out, size_t out_nbytes)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/nn/caffe_torch.py %s 2>&1", args);
    int code = sh_test_run(cmd, out, out_nbytes);
    CHECK(code == 0, "caffe_torch.py %s: %s", args, out);
    return code == 0;
}

/* Build the net of a .prototxt (batch 0: its own). NULL on failure (checked). */
static inline sh_net *cc_net(const char *prototxt, int batch)
{
    sh_cfg *cfg = NULL;
    sh_net *net = NULL;
    shoal_result rc = sh_cfg_load(prototxt, &cfg);
    if (rc == SHOAL_OK) rc = sh_net_create_owning(cfg, batch, 1, &net);
    CHECK(rc == SHOAL_OK, "building %s: %s", prototxt, shoal_last_error());
    return rc == SHOAL_OK ? net : NULL;
}

/* The floats of a file (malloc'd; *n their count), NULL when absent. */
static inline float *cc_floats(const char *path, size_t *n)
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

#endif
