/* caffe_model.c — .caffemodel weights (Caffe's NetParameter, binary protobuf through
 * protobuf-c) read into and written from a net built from a .prototxt: each Caffe layer with
 * blobs found by name (LayerParameter, or the V1 layers of older files), its blobs' shapes
 * checked and copied: Convolution W (F, C/g, k, k) and InnerProduct W (K, I) as shoal keeps
 * them; a bias before BatchNorm folded into its mean; BatchNorm's sums divided by its scale
 * factor; Scale's gamma and beta into batch norm's scales and shift.
 * Not here: which shoal layer a Caffe layer became (caffe_net.c, caffe_layers.c).
 * Proved by tests/nn/test_caffe_model.c (round trips, python3-protobuf's reading). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <protobuf-c/protobuf-c.h>

#include "base/err.h"
#include "base/log.h"
#include "nn/caffe/caffe.pb-c.h"
#include "nn/caffe/caffe_internal.h"
#include "nn/layer.h"

#define MAX_FILE_NBYTES ((size_t)2 << 30) /* protobuf's own limit for one message */

static shoal_result read_all(const char *path, uint8_t **out, size_t *n_out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return SH_FAIL(SHOAL_ERR_IO, "cannot open %s: %s; check the path", path, strerror(errno));
    shoal_result rc = SHOAL_OK;
    uint8_t *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        rc = SH_FAIL(SHOAL_ERR_IO, "cannot read %s: %s", path, strerror(errno));
        goto done;
    }
    if ((size_t)size > MAX_FILE_NBYTES) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s: %ld bytes, over protobuf's 2 GiB for one message", path, size);
        goto done;
    }
    buf = malloc((size_t)size + 1);
    if (!buf) {
        rc = SH_FAIL(SHOAL_ERR_NOMEM, "%s: out of memory for %ld bytes", path, size);
        goto done;
    }
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        rc = SH_FAIL(SHOAL_ERR_IO, "%s: short read (%s)", path, ferror(f) ? strerror(errno) : "file shrank");
        goto done;
    }
    *out = buf;
    *n_out = (size_t)size;
    buf = NULL;
done:
    free(buf);
    fclose(f);
    return rc;
}

/* The map of the net's Caffe layers, from the .prototxt it was built from. */
static shoal_result net_map(sh_net *net, const char *file, sh_caffe_map *map)
{
    const char *cfg = sh_net_cfg_path(net);
    if (!sh_caffe_is_prototxt(cfg))
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: Caffe weights go with a model read from a .prototxt; %s is not one "
                       "(use a .weights file or a shoal checkpoint)", file, cfg);
    return sh_caffe_convert(cfg, NULL, NULL, map);
}

/* --- reading ----------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    size_t n_blobs;
    Caffe__BlobProto **blobs;
} found_layer;

static int find_layer(const Caffe__NetParameter *np, const char *name, found_layer *out)
{
    for (size_t i = 0; i < np->n_layer; i++)
        if (np->layer[i]->name && !strcmp(np->layer[i]->name, name)) {
            *out = (found_layer){name, np->layer[i]->n_blobs, np->layer[i]->blobs};
            return 1;
        }
    for (size_t i = 0; i < np->n_layers; i++)
        if (np->layers[i]->name && !strcmp(np->layers[i]->name, name)) {
            *out = (found_layer){name, np->layers[i]->n_blobs, np->layers[i]->blobs};
            return 1;
        }
    return 0;
}

/* A blob's dims without leading 1s (Caffe's first files wrote (1, 1, K, I) for an
 * InnerProduct), from shape or num/channels/height/width. */
static int blob_dims(const Caffe__BlobProto *b, long long *d)
{
    long long raw[8];
    int n = 0;
    if (b->shape) {
        for (size_t i = 0; i < b->shape->n_dim && n < 8; i++) raw[n++] = b->shape->dim[i];
    } else {
        raw[0] = b->num, raw[1] = b->channels, raw[2] = b->height, raw[3] = b->width;
        n = 4;
    }
    int k = 0;
    while (k < n - 1 && raw[k] == 1) k++;
    for (int i = k; i < n; i++) d[i - k] = raw[i];
    return n - k;
}

static void dims_text(const long long *d, int n, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < n && len < cap; i++) len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? " x " : "", d[i]);
}

/* Blob i of layer f as `count` floats into out (NULL: checked only), its dims those of want. */
static shoal_result take_blob(const char *file, const found_layer *f, size_t i, const char *role,
                              const long long *want, int nwant, float *out)
{
    if (i >= f->n_blobs)
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s: layer '%s' has %zu blobs; the model needs its %s as blob %zu", file,
                       f->name, f->n_blobs, role, i + 1);
    const Caffe__BlobProto *b = f->blobs[i];
    long long have[8], want_trim[8];
    int nhave = blob_dims(b, have), k = 0;
    while (k < nwant - 1 && want[k] == 1) k++;
    for (int j = k; j < nwant; j++) want_trim[j - k] = want[j];
    int ntrim = nwant - k, same = nhave == ntrim;
    size_t count = 1;
    for (int j = 0; j < ntrim; j++) {
        count *= (size_t)want_trim[j];
        if (same && have[j] != want_trim[j]) same = 0;
    }
    size_t got = b->n_data ? b->n_data : b->n_double_data;
    if (!same || got != count) {
        char h[96], w[96];
        dims_text(have, nhave, h, sizeof h);
        dims_text(want_trim, ntrim, w, sizeof w);
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s: layer '%s' blob %zu (%s) is %s with %zu values; the model needs %s "
                       "(fine-tuning a changed layer: rename it so its old weights are left out)", file, f->name, i + 1,
                       role, h, got, w);
    }
    if (out) {
        if (b->n_data) memcpy(out, b->data, count * sizeof(float));
        else for (size_t j = 0; j < count; j++) out[j] = (float)b->double_data[j];
    }
    return SHOAL_OK;
}

static shoal_result load_entry(sh_net *net, const char *file, const sh_caffe_entry *e, const found_layer *f,
                               float *tmp)
{
    sh_layer *l = sh_net_layer(net, e->layer);
    float *params = sh_net_params(net), *stats = sh_net_stats(net, NULL);
    int c = l->out_shape.c;
    long long cl = c;
    switch (e->role) {
    case SH_CAFFE_CONV:
    case SH_CAFFE_IP: {
        long long wdims[4] = {cl, (long long)l->in_shape.c / (l->groups > 1 ? l->groups : 1), e->kh, e->kw};
        if (e->role == SH_CAFFE_IP) wdims[1] = (long long)l->inputs;
        SH_TRY(take_blob(file, f, 0, "weights", wdims, e->role == SH_CAFFE_IP ? 2 : 4, params + l->w_off));
        if (!e->bias_term) break;
        SH_TRY(take_blob(file, f, 1, "bias", &cl, 1, tmp));
        if (e->bn) /* (Wx + b - mean) / sd: b moves into the mean */
            for (int i = 0; i < c; i++) stats[l->stat_off + (size_t)i] -= tmp[i];
        else
            memcpy(params + l->b_off, tmp, (size_t)c * sizeof(float));
        break;
    }
    case SH_CAFFE_BN: {
        long long one = 1;
        float sf = 0;
        SH_TRY(take_blob(file, f, 2, "scale factor", &one, 1, &sf));
        float k = sf == 0 ? 0.0f : 1.0f / sf; /* Caffe's moving sums over its scale factor */
        SH_TRY(take_blob(file, f, 0, "mean", &cl, 1, tmp));
        for (int i = 0; i < c; i++) stats[l->stat_off + (size_t)i] = k * tmp[i];
        SH_TRY(take_blob(file, f, 1, "variance", &cl, 1, tmp));
        for (int i = 0; i < c; i++) stats[l->stat_off + (size_t)c + (size_t)i] = k * tmp[i];
        break;
    }
    case SH_CAFFE_SCALE:
        SH_TRY(take_blob(file, f, 0, "scale", &cl, 1, params + l->s_off));
        SH_TRY(take_blob(file, f, 1, "shift", &cl, 1, params + l->b_off));
        break;
    }
    return SHOAL_OK;
}

shoal_result sh_caffe_weights_load(sh_net *net, const char *path)
{
    uint8_t *buf = NULL;
    size_t n = 0;
    sh_caffe_map map;
    memset(&map, 0, sizeof map);
    Caffe__NetParameter *np = NULL;
    float *tmp = NULL;
    shoal_result rc = SHOAL_OK;
    SH_TRY(net_map(net, path, &map));
    SH_TRY_GOTO(read_all(path, &buf, &n), rc, done);
    np = caffe__net_parameter__unpack(NULL, n, buf);
    if (!np) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s: not a Caffe .caffemodel (no NetParameter could be decoded from its %zu "
                     "bytes); check the file", path, n);
        goto done;
    }
    size_t widest = 1;
    for (int i = 0; i < map.n; i++) {
        size_t c = (size_t)sh_net_layer(net, map.v[i].layer)->out_shape.c;
        if (c > widest) widest = c;
    }
    SH_TRY_GOTO(sh_calloc(widest, sizeof *tmp, (void **)&tmp), rc, done);
    char missing[256] = "";
    int nmissing = 0;
    /* batch norm's statistics first: a bias before it folds into the mean read here */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < map.n; i++) {
            const sh_caffe_entry *e = &map.v[i];
            int stat_pass = e->role == SH_CAFFE_BN || e->role == SH_CAFFE_SCALE;
            if (stat_pass != (pass == 0)) continue;
            found_layer f;
            if (!find_layer(np, e->name, &f)) {
                if (nmissing++ < 4)
                    snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s'%s'", nmissing > 1 ? ", " : "",
                             e->name);
                continue;
            }
            SH_TRY_GOTO(load_entry(net, path, e, &f, tmp), rc, done);
        }
    if (nmissing)
        SH_LOG_W("caffe", "%s has no weights for %d layer%s of %s (%s%s): they keep their initial values", path, nmissing,
                 nmissing > 1 ? "s" : "", sh_net_cfg_path(net), missing, nmissing > 4 ? ", ..." : "");
done:
    free(tmp);
    if (np) caffe__net_parameter__free_unpacked(np, NULL);
    free(buf);
    sh_caffe_map_free(&map);
    return rc;
}

/* --- writing ----------------------------------------------------------------------------- */

/* Everything one written layer owns, freed together. */
typedef struct {
    Caffe__LayerParameter layer;
    Caffe__BlobProto blob[3], *blob_ptr[3];
    Caffe__BlobShape shape[3];
    int64_t dims[3][4];
    float *data[3];
    char *bottom, *top;
} out_layer;

static shoal_result put_blob(out_layer *o, int i, const float *src, float add, float mul, const long long *dims,
                             int ndims)
{
    size_t count = 1;
    for (int d = 0; d < ndims; d++) count *= (size_t)dims[d], o->dims[i][d] = dims[d];
    SH_TRY(sh_calloc(count ? count : 1, sizeof(float), (void **)&o->data[i]));
    for (size_t j = 0; j < count; j++) o->data[i][j] = src ? mul * src[j] + add : add;
    caffe__blob_shape__init(&o->shape[i]);
    o->shape[i].n_dim = (size_t)ndims;
    o->shape[i].dim = o->dims[i];
    caffe__blob_proto__init(&o->blob[i]);
    o->blob[i].shape = &o->shape[i];
    o->blob[i].n_data = count;
    o->blob[i].data = o->data[i];
    o->blob_ptr[i] = &o->blob[i];
    o->layer.n_blobs = (size_t)i + 1;
    return SHOAL_OK;
}

static shoal_result fill_layer(sh_net *net, const sh_caffe_entry *e, out_layer *o)
{
    sh_layer *l = sh_net_layer(net, e->layer);
    const float *params = sh_net_params(net), *stats = sh_net_stats(net, NULL);
    long long c = l->out_shape.c, one = 1;
    caffe__layer_parameter__init(&o->layer);
    o->layer.name = (char *)e->name;
    o->layer.type = (char *)e->type;
    o->bottom = (char *)e->bottom;
    o->top = (char *)e->top;
    o->layer.n_bottom = e->bottom[0] ? 1 : 0;
    o->layer.bottom = &o->bottom;
    o->layer.n_top = e->top[0] ? 1 : 0;
    o->layer.top = &o->top;
    o->layer.blobs = o->blob_ptr;
    switch (e->role) {
    case SH_CAFFE_CONV: {
        long long w[4] = {c, (long long)l->in_shape.c / (l->groups > 1 ? l->groups : 1), e->kh, e->kw};
        SH_TRY(put_blob(o, 0, params + l->w_off, 0, 1, w, 4));
        break;
    }
    case SH_CAFFE_IP: {
        long long w[2] = {c, (long long)l->inputs};
        SH_TRY(put_blob(o, 0, params + l->w_off, 0, 1, w, 2));
        break;
    }
    case SH_CAFFE_BN:
        SH_TRY(put_blob(o, 0, stats + l->stat_off, 0, 1, &c, 1));
        SH_TRY(put_blob(o, 1, stats + l->stat_off + (size_t)c, 0, 1, &c, 1));
        SH_TRY(put_blob(o, 2, NULL, 1, 1, &one, 1)); /* scale factor 1: the blobs are the statistics */
        return SHOAL_OK;
    case SH_CAFFE_SCALE:
        SH_TRY(put_blob(o, 0, params + l->s_off, 0, 1, &c, 1));
        SH_TRY(put_blob(o, 1, params + l->b_off, 0, 1, &c, 1));
        return SHOAL_OK;
    }
    if (e->bias_term) /* folded into batch norm's mean when it follows: 0 here */
        SH_TRY(put_blob(o, 1, e->bn ? NULL : params + l->b_off, 0, 1, &c, 1));
    return SHOAL_OK;
}

static shoal_result write_file(const char *path, const uint8_t *buf, size_t n)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return SH_FAIL(SHOAL_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    int ok = fwrite(buf, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        return SH_FAIL(SHOAL_ERR_IO, "writing %s failed: %s", path, strerror(err));
    }
    return SHOAL_OK;
}

shoal_result sh_caffe_weights_save(sh_net *net, const char *path)
{
    sh_caffe_map map;
    out_layer *outs = NULL;
    Caffe__LayerParameter **ptrs = NULL;
    uint8_t *buf = NULL;
    shoal_result rc = SHOAL_OK;
    SH_TRY(net_map(net, path, &map));
    SH_TRY_GOTO(sh_calloc((size_t)(map.n ? map.n : 1), sizeof *outs, (void **)&outs), rc, done);
    SH_TRY_GOTO(sh_calloc((size_t)(map.n ? map.n : 1), sizeof *ptrs, (void **)&ptrs), rc, done);
    for (int i = 0; i < map.n; i++) {
        SH_TRY_GOTO(fill_layer(net, &map.v[i], &outs[i]), rc, done);
        ptrs[i] = &outs[i].layer;
    }
    Caffe__NetParameter np;
    caffe__net_parameter__init(&np);
    np.name = map.net_name;
    np.n_layer = (size_t)map.n;
    np.layer = ptrs;
    size_t n = caffe__net_parameter__get_packed_size(&np);
    SH_TRY_GOTO(sh_calloc(n ? n : 1, 1, (void **)&buf), rc, done);
    if (caffe__net_parameter__pack(&np, buf) != n) {
        rc = SH_FAIL(SHOAL_ERR_INTERNAL, "%s: protobuf-c packed a different size than it measured", path);
        goto done;
    }
    SH_TRY_GOTO(write_file(path, buf, n), rc, done);
done:
    for (int i = 0; outs && i < map.n; i++)
        for (int j = 0; j < 3; j++) free(outs[i].data[j]);
    free(outs);
    free(ptrs);
    free(buf);
    sh_caffe_map_free(&map);
    return rc;
}
