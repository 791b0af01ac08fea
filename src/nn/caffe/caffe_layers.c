/* caffe_layers.c — one Caffe layer type at a time onto shoal's sections: Input and Data set
 * the input; Convolution, InnerProduct, Pooling (Caffe's ceil output size), LRN, Dropout,
 * Eltwise (SUM), Concat and Softmax(WithLoss) become sections; ReLU/Sigmoid/TanH fold into
 * the layer whose output they read, BatchNorm + Scale into its batch_normalize; Accuracy is
 * shoal's own. Every field read is checked; a value shoal cannot honour is refused naming
 * the field.
 * Not here: the walk, blobs and [route]s (caffe_net.c), the weights (caffe_model.c).
 * Proved by tests/nn/test_caffe_net.c (each layer against PyTorch, the refusals). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "nn/caffe/caffe_internal.h"

#define MAX_DIM (1 << 16)

/* The i-th bottom or top name (marked read); NULL past the end. */
static const char *blob_name(sh_ptx *layer, const char *key, int i)
{
    sh_ptx_field *f = sh_ptx_nth(layer, key, i);
    if (!f) return NULL;
    f->used = 1;
    return f->text ? f->text : "";
}

/* The line of key's first occurrence in p, else p's own. */
static int field_line(sh_ptx *p, const char *key)
{
    sh_ptx_field *f = sh_ptx_nth(p, key, 0);
    return f ? f->line : sh_ptx_line(p);
}

static shoal_result want_blobs(sh_caffe_conv *c, sh_ptx *layer, const char *what, const char *key, int lo, int hi)
{
    int n = sh_ptx_count(layer, key);
    if (n < lo || n > hi) {
        if (lo == hi) return sh_caffe_fail(c, sh_ptx_line(layer), what, "has %d %s; it takes %d", n, key, lo);
        return sh_caffe_fail(c, sh_ptx_line(layer), what, "has %d %s; it takes %d to %d", n, key, lo, hi);
    }
    for (int i = 0; i < n; i++) {
        sh_ptx_field *f = sh_ptx_nth(layer, key, i);
        if (f->msg || !f->is_string)
            return sh_caffe_fail(c, f->line, what, "%s is a quoted blob name: %s: \"name\"", key, key);
    }
    return SHOAL_OK;
}

/* The one bottom as a blob, read by the section about to be emitted. */
static shoal_result read_bottom(sh_caffe_conv *c, sh_ptx *layer, const char *what, sh_caffe_blob **out)
{
    SH_TRY(want_blobs(c, layer, what, "bottom", 1, 1));
    SH_TRY(want_blobs(c, layer, what, "top", 1, 1));
    SH_TRY(sh_caffe_blob_find(c, layer, what, blob_name(layer, "bottom", 0), out));
    return sh_caffe_read(c, layer, what, *out);
}

/* The top names the last emitted section's output. */
static shoal_result set_top(sh_caffe_conv *c, sh_ptx *layer)
{
    return sh_caffe_blob_set(c, blob_name(layer, "top", 0), c->nouts - 1);
}

/* param { lr_mult decay_mult }: shoal trains every parameter at the solver's rate, weights
 * with decay and the rest without; other values are said once and ignored. Shared weights
 * (name) are refused. */
static shoal_result check_params(sh_caffe_conv *c, sh_ptx *layer, const char *what, int trained)
{
    int n = sh_ptx_count(layer, "param");
    for (int i = 0; i < n; i++) {
        sh_ptx_field *f = sh_ptx_nth(layer, "param", i);
        f->used = 1;
        if (!f->msg) return sh_caffe_fail(c, f->line, what, "param is a message: param { lr_mult: 1 }");
        sh_ptx *p = f->msg;
        const char *name = NULL;
        double lr = 1, decay = 1;
        SH_TRY(sh_ptx_str(p, what, "name", "", &name));
        if (name[0])
            return sh_caffe_fail(c, f->line, what, "param name \"%s\" shares weights between layers, which is not "
                                 "mapped; remove the name", name);
        SH_TRY(sh_ptx_float(p, what, "lr_mult", 1, &lr));
        SH_TRY(sh_ptx_float(p, what, "decay_mult", i == 0 ? 1 : 0, &decay));
        sh_ptx_skip(p, "share_mode");
        double want_decay = i == 0 ? 1 : 0;
        if (trained && (lr != 1 || decay != want_decay))
            sh_caffe_warn_once(c, SH_CAFFE_WARN_LR, f->line, what, "param lr_mult %g decay_mult %g ignored: shoal "
                               "trains every parameter at the solver's rate, weights with weight_decay and biases "
                               "without (said once per file)", lr, decay);
    }
    return SHOAL_OK;
}

static void skip_fillers(sh_caffe_conv *c, sh_ptx *p, const char *what)
{
    const char *keys[] = {"weight_filler", "bias_filler", "filler"};
    for (int i = 0; i < 3; i++)
        if (sh_ptx_count(p, keys[i])) {
            sh_caffe_warn_once(c, SH_CAFFE_WARN_FILLER, sh_ptx_nth(p, keys[i], 0)->line, what, "%s ignored: shoal "
                               "draws its own initial weights (He normal), or reads them from --weights (said once "
                               "per file)", keys[i]);
            sh_ptx_skip(p, keys[i]);
        }
}

/* kernel, stride, pad as Caffe gives them: one value (or kernel_h/_w etc.); square only. */
static shoal_result square(sh_caffe_conv *c, sh_ptx *p, const char *what, const char *key, long long def,
                           long long *out)
{
    char kh[32], kw[32];
    const char *base = !strcmp(key, "kernel_size") ? "kernel" : key;
    snprintf(kh, sizeof kh, "%s_h", base);
    snprintf(kw, sizeof kw, "%s_w", base);
    int n = sh_ptx_count(p, key);
    long long v = def, h = -1, w = -1;
    if (n > 2) return sh_caffe_fail(c, sh_ptx_line(p), what, "%s has %d values; 2-D layers take 1 or 2", key, n);
    for (int i = 0; i < n; i++) {
        long long x = 0;
        SH_TRY(sh_ptx_int_at(p, what, key, i, 0, MAX_DIM, &x));
        if (i == 0) v = x;
        else if (x != v)
            return sh_caffe_fail(c, field_line(p, key), what, "%s %lld x %lld is not square; shoal's layers take one "
                                 "size for height and width", key, v, x);
    }
    SH_TRY(sh_ptx_int(p, what, kh, -1, 0, MAX_DIM, &h));
    SH_TRY(sh_ptx_int(p, what, kw, -1, 0, MAX_DIM, &w));
    if ((h >= 0) != (w >= 0))
        return sh_caffe_fail(c, sh_ptx_line(p), what, "%s and %s go together; give both", kh, kw);
    if (h >= 0 && n) return sh_caffe_fail(c, sh_ptx_line(p), what, "give either %s or %s and %s", key, kh, kw);
    if (h >= 0 && h != w)
        return sh_caffe_fail(c, field_line(p, kw), what, "%s %lld and %s %lld differ; shoal's layers take one size for "
                             "height and width", kh, h, kw, w);
    if (h >= 0) v = h;
    *out = v;
    return SHOAL_OK;
}

static shoal_result param_msg(sh_caffe_conv *c, sh_ptx *layer, const char *what, const char *name, int required,
                              sh_ptx **out)
{
    SH_TRY(sh_ptx_msg(layer, name, out));
    if (!*out && required) return sh_caffe_fail(c, sh_ptx_line(layer), what, "needs %s { ... }", name);
    return SHOAL_OK;
}

static shoal_result check_axis(sh_caffe_conv *c, sh_ptx *p, const char *what, const char *key, long long want)
{
    long long axis = want;
    if (!p) return SHOAL_OK;
    SH_TRY(sh_ptx_int(p, what, key, want, -8, 8, &axis));
    if (axis != want)
        return sh_caffe_fail(c, sh_ptx_line(p), what, "%s %lld is not mapped: shoal's layers work on axis %lld (the "
                             "channels)", key, axis, want);
    return SHOAL_OK;
}

/* --- input ------------------------------------------------------------------------------- */

static shoal_result set_input(sh_caffe_conv *c, sh_ptx *layer, const char *what, int ntops)
{
    if (c->has_input)
        return sh_caffe_fail(c, sh_ptx_line(layer), what, "is a second input; shoal's nets have one input (and the "
                             "labels)");
    c->has_input = 1;
    SH_TRY(sh_caffe_blob_set(c, blob_name(layer, "top", 0), SH_BLOB_INPUT));
    for (int i = 1; i < ntops; i++) SH_TRY(sh_caffe_blob_set(c, blob_name(layer, "top", i), SH_BLOB_LABEL));
    return SHOAL_OK;
}

static shoal_result map_input(sh_caffe_conv *c, sh_ptx *layer, const char *what)
{
    sh_ptx *p = NULL, *shape = NULL;
    SH_TRY(want_blobs(c, layer, what, "bottom", 0, 0));
    SH_TRY(want_blobs(c, layer, what, "top", 1, 2));
    SH_TRY(param_msg(c, layer, what, "input_param", 1, &p));
    SH_TRY(sh_ptx_msg(p, "shape", &shape));
    if (!shape) return sh_caffe_fail(c, sh_ptx_line(p), what, "needs input_param { shape { dim: N dim: C dim: H dim: W } }");
    sh_ptx_skip(p, "shape"); /* a second shape would be the labels' */
    int nd = sh_ptx_count(shape, "dim");
    if (nd != 4 && nd != 2)
        return sh_caffe_fail(c, sh_ptx_line(shape), what, "shape has %d dims; shoal takes (N, C, H, W) or (N, C)", nd);
    long long d[4] = {1, 1, 1, 1};
    for (int i = 0; i < nd; i++) SH_TRY(sh_ptx_int_at(shape, what, "dim", i, 1, 1 << 24, &d[i]));
    c->input = (sh_shape){(int)d[1], (int)d[2], (int)d[3]};
    c->batch = (int)d[0];
    return set_input(c, layer, what, sh_ptx_count(layer, "top"));
}

/* Shoal's datasets come scaled to [0, 1]: Caffe's 1/255 or 1/256 (LeNet's 0.00390625). */
static shoal_result map_data(sh_caffe_conv *c, sh_ptx *layer, const char *what)
{
    sh_ptx *d = NULL, *t = NULL;
    SH_TRY(want_blobs(c, layer, what, "bottom", 0, 0));
    SH_TRY(want_blobs(c, layer, what, "top", 1, 2));
    SH_TRY(param_msg(c, layer, what, "data_param", 1, &d));
    SH_TRY(param_msg(c, layer, what, "transform_param", 0, &t));
    long long batch = 0;
    SH_TRY(sh_ptx_int(d, what, "batch_size", 0, 1, 1 << 24, &batch));
    if (!batch) return sh_caffe_fail(c, sh_ptx_line(d), what, "needs data_param { batch_size: N }");
    c->batch = (int)batch;
    if (sh_ptx_count(d, "source"))
        sh_caffe_warn_once(c, SH_CAFFE_WARN_SOURCE, sh_ptx_nth(d, "source", 0)->line, what, "data_param source is not "
                           "read: shoal trains on --data (an IDX or CIFAR-10 directory), scaled to [0, 1]");
    const char *ignored[] = {"source", "backend", "rand_skip", "prefetch"};
    for (int i = 0; i < 4; i++) sh_ptx_skip(d, ignored[i]);
    if (t) {
        double scale = 1;
        int mirror = 0;
        long long crop = 0;
        SH_TRY(sh_ptx_float(t, what, "scale", 1, &scale));
        if (fabs(scale * 255.0 - 1.0) > 0.01)
            return sh_caffe_fail(c, sh_ptx_nth(t, "scale", 0) ? sh_ptx_nth(t, "scale", 0)->line : sh_ptx_line(t), what,
                                 "transform_param scale %g is not mapped: shoal's images come scaled to [0, 1] (Caffe's "
                                 "scale 0.00390625); remove it or set that", scale);
        SH_TRY(sh_ptx_bool(t, what, "mirror", 0, &mirror));
        SH_TRY(sh_ptx_int(t, what, "crop_size", 0, 0, MAX_DIM, &crop));
        if (mirror || crop)
            return sh_caffe_fail(c, sh_ptx_line(t), what, "transform_param %s is not mapped: shoal does not augment "
                                 "its data; remove it", mirror ? "mirror" : "crop_size");
    }
    if (c->input.c <= 0)
        return sh_caffe_fail(c, sh_ptx_line(layer), what, "a Data layer's shape is its dataset's, which is known only "
                             "to shoal train (--data); elsewhere give the net an Input layer with input_param { shape "
                             "{ dim: N dim: C dim: H dim: W } }");
    return set_input(c, layer, what, sh_ptx_count(layer, "top"));
}

/* --- layers with weights ----------------------------------------------------------------- */

static shoal_result map_conv(sh_caffe_conv *c, sh_ptx *layer, const char *what)
{
    sh_ptx *p = NULL;
    sh_caffe_blob *b = NULL;
    SH_TRY(param_msg(c, layer, what, "convolution_param", 1, &p));
    SH_TRY(check_params(c, layer, what, 1));
    long long k = 0, s = 1, pad = 0, filters = 0, group = 1, dil = 1;
    int bias = 1;
    SH_TRY(sh_ptx_int(p, what, "num_output", 0, 1, MAX_DIM, &filters));
    if (!filters) return sh_caffe_fail(c, sh_ptx_line(p), what, "needs convolution_param { num_output: N }");
    SH_TRY(sh_ptx_bool(p, what, "bias_term", 1, &bias));
    SH_TRY(square(c, p, what, "kernel_size", 0, &k));
    if (k < 1) return sh_caffe_fail(c, sh_ptx_line(p), what, "needs kernel_size (or kernel_h and kernel_w) of 1 or more");
    SH_TRY(square(c, p, what, "stride", 1, &s));
    SH_TRY(square(c, p, what, "pad", 0, &pad));
    SH_TRY(square(c, p, what, "dilation", 1, &dil));
    if (dil != 1) return sh_caffe_fail(c, field_line(p, "dilation"), what, "dilation %lld is not mapped: shoal's convolutions are "
                                       "not dilated", dil);
    if (s < 1) return sh_caffe_fail(c, sh_ptx_line(p), what, "stride 0; use 1 or more");
    SH_TRY(sh_ptx_int(p, what, "group", 1, 1, MAX_DIM, &group));
    SH_TRY(check_axis(c, p, what, "axis", 1));
    sh_ptx_skip(p, "engine");
    sh_ptx_skip(p, "force_nd_im2col");
    skip_fillers(c, p, what);
    SH_TRY(read_bottom(c, layer, what, &b));
    sh_shape in = c->nouts ? c->outs[c->nouts - 1].out : c->input;
    long long oh = (in.h + 2 * pad - k) / s + 1, ow = (in.w + 2 * pad - k) / s + 1;
    if (in.h + 2 * pad < k || in.w + 2 * pad < k)
        return sh_caffe_fail(c, sh_ptx_line(p), what, "kernel %lld with pad %lld does not fit its %dx%dx%d input",
                             k, pad, in.c, in.h, in.w);
    if (in.c % group || filters % group)
        return sh_caffe_fail(c, sh_ptx_line(p), what, "group %lld does not divide the %d input channels and num_output "
                             "%lld", group, in.c, filters);
    sh_caffe_out *o = NULL;
    SH_TRY(sh_caffe_emit(c, "convolutional", what, sh_ptx_line(layer), &o));
    SH_TRY(sh_caffe_key(o, "filters", "%lld", filters));
    SH_TRY(sh_caffe_key(o, "size", "%lld", k));
    SH_TRY(sh_caffe_key(o, "stride", "%lld", s));
    SH_TRY(sh_caffe_key(o, "padding", "%lld", pad));
    if (group > 1) SH_TRY(sh_caffe_key(o, "groups", "%lld", group));
    o->out = (sh_shape){(int)filters, (int)oh, (int)ow};
    o->can_act = 1;
    o->no_bias = !bias;
    sh_caffe_entry *e = NULL;
    SH_TRY(sh_caffe_entry_add(c, layer, SH_CAFFE_CONV, c->nouts - 1, &e));
    if (e) {
        e->bias_term = bias;
        e->kh = e->kw = (int)k;
        o->entry = c->map->n - 1;
    }
    return set_top(c, layer);
}

static shoal_result map_ip(sh_caffe_conv *c, sh_ptx *layer, const char *what)
{
    sh_ptx *p = NULL;
    sh_caffe_blob *b = NULL;
    SH_TRY(param_msg(c, layer, what, "inner_product_param", 1, &p));
    SH_TRY(check_params(c, layer, what, 1));
    long long k = 0;
    int bias = 1, transpose = 0;
    SH_TRY(sh_ptx_int(p, what, "num_output", 0, 1, 1 << 24, &k));
    if (!k) return sh_caffe_fail(c, sh_ptx_line(p), what, "needs inner_product_param { num_output: N }");
    SH_TRY(sh_ptx_bool(p, what, "bias_term", 1, &bias));
    SH_TRY(sh_ptx_bool(p, what, "transpose", 0, &transpose));
    if (transpose)
        return sh_caffe_fail(c, sh_ptx_line(p), what, "transpose: true is not mapped: shoal keeps weights (out, in) "
                             "as Caffe's default");
    SH_TRY(check_axis(c, p, what, "axis", 1));
    skip_fillers(c, p, what);
    SH_TRY(read_bottom(c, layer, what, &b));
    sh_caffe_out *o = NULL;
    SH_TRY(sh_caffe_emit(c, "connected", what, sh_ptx_line(layer), &o));
    SH_TRY(sh_caffe_key(o, "output", "%lld", k));
    o->out = (sh_shape){(int)k, 1, 1};
    o->can_act = 1;
    o->no_bias = !bias;
    sh_caffe_entry *e = NULL;
    SH_TRY(sh_caffe_entry_add(c, layer, SH_CAFFE_IP, c->nouts - 1, &e));
    if (e) {
        e->bias_term = bias;
        o->entry = c->map->n - 1;
    }
    return set_top(c, layer);
}

/* --- pooling and normalisation ------------------------------------------------------------ */

static const char *const pool_methods[] = {"MAX", "AVE", "STOCHASTIC"};
static const char *const round_modes[] = {"CEIL", "FLOOR"};

/* Caffe's pooled size: ceil (or floor) of (in + 2 pad - k) / s, plus one, less the last
 * window when it would start in the padding. */
static int caffe_pooled(int in, int k, int s, int pad, int ceil_mode)
{
    int span = in + 2 * pad - k;
    int out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (pad > 0 && (out - 1) * s >= in + pad) out--;
    return out;
}

static shoal_result map_pool(sh_caffe_conv *c, sh_ptx *layer, const char *what)
{
    sh_ptx *p = NULL;
    sh_caffe_blob *b = NULL;
    SH_TRY(param_msg(c, layer, what, "pooling_param", 1, &p));
    int method = 0, global = 0, round = 0;
    long long k = 0, s = 1, pad = 0;
    SH_TRY(sh_ptx_enum(p, what, "pool", pool_methods, 3, 0, &method));
    SH_TRY(sh_ptx_bool(p, what, "global_pooling", 0, &global));
    SH_TRY(sh_ptx_enum(p, what, "round_mode", round_modes, 2, 0, &round));
    SH_TRY(square(c, p, what, "kernel_size", 0, &k));
    SH_TRY(square(c, p, what, "stride", 1, &s));
    SH_TRY(square(c, p, what, "pad", 0, &pad));
    sh_ptx_skip(p, "engine");
    if (method == 2)
        return sh_caffe_fail(c, field_line(p, "pool"), what, "pool: STOCHASTIC is not mapped; use MAX or AVE");
    SH_TRY(read_bottom(c, layer, what, &b));
    sh_shape in = c->nouts ? c->outs[c->nouts - 1].out : c->input;
    if (global) {
        if (in.h != in.w && method == 0)
            return sh_caffe_fail(c, sh_ptx_line(p), what, "global MAX pooling over a %dx%d (not square) input is not "
                                 "mapped", in.h, in.w);
        k = in.h;
        s = 1;
        pad = 0;
    }
    if (k < 1 || s < 1)
        return sh_caffe_fail(c, sh_ptx_line(p), what, "needs kernel_size (or global_pooling) and a stride of 1 or more");
    if (pad >= k) return sh_caffe_fail(c, sh_ptx_line(p), what, "pad %lld must be smaller than kernel %lld", pad, k);
    if (in.h + 2 * pad < k || in.w + 2 * pad < k)
        return sh_caffe_fail(c, sh_ptx_line(p), what, "kernel %lld does not fit its %dx%d input", k, in.h, in.w);
    int oh = caffe_pooled(in.h, (int)k, (int)s, (int)pad, round == 0);
    int ow = caffe_pooled(in.w, (int)k, (int)s, (int)pad, round == 0);
    sh_caffe_out *o = NULL;
    if (method == 1) { /* AVE: shoal has the global mean */
        if (!(oh == 1 && ow == 1 && pad == 0 && k >= in.h && k >= in.w))
            return sh_caffe_fail(c, sh_ptx_line(p), what, "AVE pooling over %lldx%lld windows of a %dx%d input is not "
                                 "mapped: shoal averages whole images (global_pooling: true); use that or MAX",
                                 k, k, in.h, in.w);
        SH_TRY(sh_caffe_emit(c, "avgpool", what, sh_ptx_line(layer), &o));
        o->out = (sh_shape){in.c, 1, 1};
        return set_top(c, layer);
    }
    SH_TRY(sh_caffe_emit(c, "maxpool", what, sh_ptx_line(layer), &o));
    SH_TRY(sh_caffe_key(o, "size", "%lld", k));
    SH_TRY(sh_caffe_key(o, "stride", "%lld", s));
    SH_TRY(sh_caffe_key(o, "padding", "%lld", 2 * pad));
    if (oh != caffe_pooled(in.h, (int)k, (int)s, (int)pad, 0) || ow != caffe_pooled(in.w, (int)k, (int)s, (int)pad, 0))
        SH_TRY(sh_caffe_key(o, "ceil", "1"));
    o->out = (sh_shape){in.c, oh, ow};
    return set_top(c, layer);
}

static const char *const norm_regions[] = {"ACROSS_CHANNELS", "WITHIN_CHANNEL"};

static shoal_result map_lrn(sh_caffe_conv *c, sh_ptx *layer, const char *what)
{
    sh_ptx *p = NULL;
    sh_caffe_blob *b = NULL;
    SH_TRY(param_msg(c, layer, what, "lrn_param", 0, &p));
    long long size = 5;
    double alpha = 1, beta = 0.75, k = 1;
    int region = 0;
    if (p) {
        SH_TRY(sh_ptx_int(p, what, "local_size", 5, 1, MAX_DIM, &size));
        SH_TRY(sh_ptx_float(p, what, "alpha", 1, &alpha));
        SH_TRY(sh_ptx_float(p, what, "beta", 0.75, &beta));
        SH_TRY(sh_ptx_float(p, what, "k", 1, &k));
        SH_TRY(sh_ptx_enum(p, what, "norm_region", norm_regions, 2, 0, &region));
        sh_ptx_skip(p, "engine");
    }
    if (region == 1)
        return sh_caffe_fail(c, field_line(p, "norm_region"), what, "norm_region: WITHIN_CHANNEL is not mapped: shoal's [normalization] "
                             "works across channels");
    if (size % 2 == 0)
        return sh_caffe_fail(c, sh_ptx_line(p), what, "local_size %lld is even; Caffe takes odd sizes", size);
    if (!(alpha >= 0) || !(beta >= 0) || !(k > 0))
        return sh_caffe_fail(c, sh_ptx_line(p), what, "alpha %g, beta %g, k %g: want alpha, beta >= 0 and k > 0", alpha,
                             beta, k);
    SH_TRY(read_bottom(c, layer, what, &b));
    sh_caffe_out *o = NULL;
    SH_TRY(sh_caffe_emit(c, "normalization", what, sh_ptx_line(layer), &o));
    SH_TRY(sh_caffe_key(o, "size", "%lld", size));
    SH_TRY(sh_caffe_key(o, "alpha", "%.9g", alpha / (double)size)); /* Caffe's alpha is per window */
    SH_TRY(sh_caffe_key(o, "beta", "%.9g", beta));
    SH_TRY(sh_caffe_key(o, "kappa", "%.9g", k));
    return set_top(c, layer);
}

static shoal_result map_dropout(sh_caffe_conv *c, sh_ptx *layer, const char *what)
{
    sh_ptx *p = NULL;
    sh_caffe_blob *b = NULL;
    double ratio = 0.5;
    int scale_train = 1;
    SH_TRY(param_msg(c, layer, what, "dropout_param", 0, &p));
    if (p) {
        SH_TRY(sh_ptx_float(p, what, "dropout_ratio", 0.5, &ratio));
        SH_TRY(sh_ptx_bool(p, what, "scale_train", 1, &scale_train));
    }
    if (!scale_train)
        return sh_caffe_fail(c, sh_ptx_line(p), what, "scale_train: false is not mapped: shoal scales kept values by "
                             "1/(1-p) in training");
    if (!(ratio >= 0 && ratio < 0.999))
        return sh_caffe_fail(c, sh_ptx_line(p), what, "dropout_ratio %g: want 0 to 0.999", ratio);
    SH_TRY(read_bottom(c, layer, what, &b));
    sh_caffe_out *o = NULL;
    SH_TRY(sh_caffe_emit(c, "dropout", what, sh_ptx_line(layer), &o));
    SH_TRY(sh_caffe_key(o, "probability", "%.9g", ratio));
    return set_top(c, layer);
}

/* --- what folds into the layer before --------------------------------------------------- */

/* The one bottom's blob, which must be a layer's output nobody read yet: it is changed in
 * place. A top under a new name leaves the old name stale. */
static shoal_result fold_target(sh_caffe_conv *c, sh_ptx *layer, const char *what, const char *needs,
                                sh_caffe_out **out)
{
    sh_caffe_blob *b = NULL;
    SH_TRY(want_blobs(c, layer, what, "bottom", 1, 1));
    SH_TRY(want_blobs(c, layer, what, "top", 1, 1));
    SH_TRY(sh_caffe_blob_find(c, layer, what, blob_name(layer, "bottom", 0), &b));
    if (b->src < 0)
        return sh_caffe_fail(c, sh_ptx_line(layer), what, "reads \"%s\", which is the %s; it must follow %s", b->name,
                             b->src == SH_BLOB_INPUT ? "input" : "labels", needs);
    if (b->consumed)
        return sh_caffe_fail(c, sh_ptx_line(layer), what, "changes \"%s\" after another layer read it; shoal folds "
                             "this layer into the one that made it, so put it before the readers", b->name);
    *out = &c->outs[b->src];
    const char *top = blob_name(layer, "top", 0);
    if (strcmp(top, b->name) != 0) {
        int src = b->src;
        b->src = SH_BLOB_STALE;
        snprintf(b->stale_by, sizeof b->stale_by, "%s", what);
        SH_TRY(sh_caffe_blob_set(c, top, src));
    }
    return SHOAL_OK;
}

static shoal_result map_activation(sh_caffe_conv *c, sh_ptx *layer, const char *what, const char *type)
{
    const char *act = !strcmp(type, "ReLU") ? "relu" : !strcmp(type, "Sigmoid") ? "logistic" : "tanh";
    sh_ptx *p = NULL;
    if (!strcmp(type, "ReLU")) {
        SH_TRY(param_msg(c, layer, what, "relu_param", 0, &p));
        double slope = 0;
        if (p) {
            SH_TRY(sh_ptx_float(p, what, "negative_slope", 0, &slope));
            sh_ptx_skip(p, "engine");
        }
        if (slope != 0 && fabs(slope - 0.1) > 1e-6)
            return sh_caffe_fail(c, sh_ptx_line(p), what, "negative_slope %g is not mapped: shoal's leaky ReLU has "
                                 "slope 0.1 (and 0 is ReLU)", slope);
        if (slope != 0) act = "leaky";
    } else {
        SH_TRY(param_msg(c, layer, what, !strcmp(type, "Sigmoid") ? "sigmoid_param" : "tanh_param", 0, &p));
        if (p) sh_ptx_skip(p, "engine");
    }
    sh_caffe_out *o = NULL;
    SH_TRY(fold_target(c, layer, what, "a Convolution, InnerProduct or Eltwise", &o));
    if (!o->can_act || o->act[0] || o->bn == 2)
        return sh_caffe_fail(c, sh_ptx_line(layer), what, "follows %s, %s; shoal applies %s as the activation of a "
                             "Convolution, InnerProduct or Eltwise (after its BatchNorm and Scale)", o->caffe,
                             o->bn == 2 ? "between its BatchNorm and Scale" : o->act[0] ? "which has an activation already"
                             : "which takes none", type);
    snprintf(o->act, sizeof o->act, "%s", act);
    return SHOAL_OK;
}

static shoal_result map_batchnorm(sh_caffe_conv *c, sh_ptx *layer, const char *what)
{
    sh_ptx *p = NULL;
    SH_TRY(param_msg(c, layer, what, "batch_norm_param", 0, &p));
    SH_TRY(check_params(c, layer, what, 0)); /* lr_mult 0: the statistics are not trained anyway */
    double eps = 1e-5, fraction = 0.999;
    int global = 0;
    if (p) {
        SH_TRY(sh_ptx_float(p, what, "eps", 1e-5, &eps));
        SH_TRY(sh_ptx_float(p, what, "moving_average_fraction", 0.999, &fraction));
        SH_TRY(sh_ptx_bool(p, what, "use_global_stats", 0, &global));
    }
    if (fabs(eps - 1e-5) > 1e-8)
        return sh_caffe_fail(c, p ? sh_ptx_line(p) : sh_ptx_line(layer), what, "eps %g is not mapped: shoal's batch "
                             "norm adds 1e-5 (Caffe's default)", eps);
    if (fabs(fraction - 0.99) > 1e-6 || global)
        sh_caffe_warn_once(c, SH_CAFFE_WARN_BN, sh_ptx_line(layer), what, "shoal's batch norm normalises with the "
                           "batch's statistics in training and the rolling ones in testing (use_global_stats ignored), "
                           "its rolling average keeping 0.99 of the old value (moving_average_fraction %g ignored)",
                           fraction);
    sh_caffe_out *o = NULL;
    SH_TRY(fold_target(c, layer, what, "a Convolution or InnerProduct", &o));
    if (strcmp(o->kind, "convolutional") && strcmp(o->kind, "connected"))
        return sh_caffe_fail(c, sh_ptx_line(layer), what, "follows %s; shoal's batch norm is part of a Convolution or "
                             "InnerProduct, so BatchNorm must read one's top", o->caffe);
    if (o->bn || o->act[0])
        return sh_caffe_fail(c, sh_ptx_line(layer), what, "follows %s, which has %s already; shoal runs batch norm "
                             "right after the product", o->caffe, o->bn ? "a BatchNorm" : "an activation");
    o->bn = 2;
    sh_caffe_entry *e = NULL;
    SH_TRY(sh_caffe_entry_add(c, layer, SH_CAFFE_BN, (int)(o - c->outs), &e));
    return SHOAL_OK;
}

static shoal_result map_scale(sh_caffe_conv *c, sh_ptx *layer, const char *what)
{
    sh_ptx *p = NULL;
    SH_TRY(param_msg(c, layer, what, "scale_param", 0, &p));
    SH_TRY(check_params(c, layer, what, 1));
    int bias = 0;
    long long num_axes = 1;
    if (p) {
        SH_TRY(sh_ptx_bool(p, what, "bias_term", 0, &bias));
        SH_TRY(check_axis(c, p, what, "axis", 1));
        SH_TRY(sh_ptx_int(p, what, "num_axes", 1, -1, 8, &num_axes));
        skip_fillers(c, p, what);
    }
    sh_caffe_out *o = NULL;
    SH_TRY(fold_target(c, layer, what, "a BatchNorm", &o));
    if (o->bn != 2)
        return sh_caffe_fail(c, sh_ptx_line(layer), what, "is mapped only right after a BatchNorm (as its scale and "
                             "shift); %s has none waiting", o->caffe);
    if (!bias || num_axes != 1)
        return sh_caffe_fail(c, p ? sh_ptx_line(p) : sh_ptx_line(layer), what, "%s is not mapped: shoal's batch norm "
                             "has one scale and one shift per channel; set scale_param { bias_term: true }",
                             !bias ? "a Scale without bias_term" : "num_axes other than 1");
    o->bn = 1;
    sh_caffe_entry *e = NULL;
    SH_TRY(sh_caffe_entry_add(c, layer, SH_CAFFE_SCALE, (int)(o - c->outs), &e));
    return SHOAL_OK;
}

/* --- joins and the end ------------------------------------------------------------------- */

static const char *const eltwise_ops[] = {"PROD", "SUM", "MAX"};

static shoal_result map_eltwise(sh_caffe_conv *c, sh_ptx *layer, const char *what)
{
    sh_ptx *p = NULL;
    int op = 1;
    SH_TRY(param_msg(c, layer, what, "eltwise_param", 0, &p));
    SH_TRY(want_blobs(c, layer, what, "bottom", 2, 64));
    SH_TRY(want_blobs(c, layer, what, "top", 1, 1));
    int nb = sh_ptx_count(layer, "bottom");
    if (p) {
        SH_TRY(sh_ptx_enum(p, what, "operation", eltwise_ops, 3, 1, &op));
        sh_ptx_skip(p, "stable_prod_grad");
        for (int i = 0; i < sh_ptx_count(p, "coeff"); i++) {
            double v = 0;
            sh_ptx_field *f = sh_ptx_nth(p, "coeff", i);
            f->used = 1;
            if (f->msg || sscanf(f->text, "%lf", &v) != 1 || v != 1)
                return sh_caffe_fail(c, f->line, what, "coeff %s is not mapped: shoal's residual add weighs every input "
                                     "1", f->text ? f->text : "{}");
        }
    }
    if (op != 1)
        return sh_caffe_fail(c, field_line(p, "operation"), what, "operation %s is not mapped: shoal adds (SUM)", eltwise_ops[op]);
    int src[64];
    for (int i = 0; i < nb; i++) {
        sh_caffe_blob *b = NULL;
        SH_TRY(sh_caffe_blob_find(c, layer, what, blob_name(layer, "bottom", i), &b));
        if (b->src < 0)
            return sh_caffe_fail(c, sh_ptx_line(layer), what, "adds \"%s\", the %s; shoal adds layers' outputs only",
                                 b->name, b->src == SH_BLOB_INPUT ? "input" : "labels");
        if (i && memcmp(&c->outs[b->src].out, &c->outs[src[0]].out, sizeof(sh_shape)) != 0)
            return sh_caffe_fail(c, sh_ptx_line(layer), what, "adds \"%s\" (%dx%dx%d) to a %dx%dx%d blob; Eltwise needs "
                                 "equal shapes", b->name, c->outs[b->src].out.c, c->outs[b->src].out.h,
                                 c->outs[b->src].out.w, c->outs[src[0]].out.c, c->outs[src[0]].out.h,
                                 c->outs[src[0]].out.w);
        src[i] = b->src;
        if (i == 0) SH_TRY(sh_caffe_read(c, layer, what, b));
        else b->consumed++;
    }
    for (int i = 1; i < nb; i++) {
        sh_caffe_out *o = NULL;
        SH_TRY(sh_caffe_emit(c, "shortcut", what, sh_ptx_line(layer), &o));
        SH_TRY(sh_caffe_key(o, "from", "%d", src[i]));
        o->can_act = 1;
    }
    return set_top(c, layer);
}

static shoal_result map_concat(sh_caffe_conv *c, sh_ptx *layer, const char *what)
{
    sh_ptx *p = NULL;
    SH_TRY(param_msg(c, layer, what, "concat_param", 0, &p));
    SH_TRY(check_axis(c, p, what, "axis", 1));
    SH_TRY(check_axis(c, p, what, "concat_dim", 1));
    SH_TRY(want_blobs(c, layer, what, "bottom", 1, 8));
    SH_TRY(want_blobs(c, layer, what, "top", 1, 1));
    char list[256] = "";
    size_t len = 0;
    sh_shape out = {0, 0, 0};
    int nb = sh_ptx_count(layer, "bottom");
    for (int i = 0; i < nb; i++) {
        sh_caffe_blob *b = NULL;
        SH_TRY(sh_caffe_blob_find(c, layer, what, blob_name(layer, "bottom", i), &b));
        if (b->src < 0)
            return sh_caffe_fail(c, sh_ptx_line(layer), what, "joins \"%s\", the %s; shoal joins layers' outputs only",
                                 b->name, b->src == SH_BLOB_INPUT ? "input" : "labels");
        sh_shape s = c->outs[b->src].out;
        if (i && (s.h != out.h || s.w != out.w))
            return sh_caffe_fail(c, sh_ptx_line(layer), what, "joins \"%s\" of %dx%d to %dx%d blobs; Concat over "
                                 "channels needs equal heights and widths", b->name, s.h, s.w, out.h, out.w);
        out = (sh_shape){out.c + s.c, s.h, s.w};
        b->consumed++;
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", i ? "," : "", b->src);
    }
    sh_caffe_out *o = NULL;
    SH_TRY(sh_caffe_emit(c, "route", what, sh_ptx_line(layer), &o));
    SH_TRY(sh_cfg_add_key(o->sec, "layers", list, o->line));
    o->out = out;
    return set_top(c, layer);
}

static const char *const norm_modes[] = {"FULL", "VALID", "BATCH_SIZE", "NONE"};

static shoal_result map_softmax(sh_caffe_conv *c, sh_ptx *layer, const char *what, int loss)
{
    sh_ptx *p = NULL, *lp = NULL;
    SH_TRY(param_msg(c, layer, what, "softmax_param", 0, &p));
    SH_TRY(check_axis(c, p, what, "axis", 1));
    if (p) sh_ptx_skip(p, "engine");
    if (loss) {
        int mode = 1;
        SH_TRY(param_msg(c, layer, what, "loss_param", 0, &lp));
        if (lp) {
            SH_TRY(sh_ptx_enum(lp, what, "normalization", norm_modes, 4, 1, &mode));
            sh_ptx_skip(lp, "normalize");
            if (sh_ptx_count(lp, "ignore_label"))
                return sh_caffe_fail(c, sh_ptx_nth(lp, "ignore_label", 0)->line, what, "loss_param ignore_label is not "
                                     "mapped: shoal counts every image");
        }
        if (mode == 3)
            return sh_caffe_fail(c, sh_ptx_line(lp), what, "normalization: NONE is not mapped: shoal's loss is the mean "
                                 "over the batch");
        double w = 1;
        SH_TRY(sh_ptx_float(layer, what, "loss_weight", 1, &w));
        if (w != 1) return sh_caffe_fail(c, sh_ptx_line(layer), what, "loss_weight %g is not mapped: shoal's loss "
                                         "weighs 1", w);
        SH_TRY(want_blobs(c, layer, what, "bottom", 2, 2));
        sh_caffe_blob *label = NULL;
        SH_TRY(sh_caffe_blob_find(c, layer, what, blob_name(layer, "bottom", 1), &label));
        if (label->src != SH_BLOB_LABEL)
            return sh_caffe_fail(c, sh_ptx_line(layer), what, "its second bottom \"%s\" must be the labels (the input "
                                 "layer's second top)", label->name);
        sh_ptx_field *f = sh_ptx_nth(layer, "bottom", 1);
        sh_ptx_skip(layer, "bottom"); /* both read: the first below */
        f->used = 1;
        sh_ptx_skip(layer, "top");
        sh_caffe_blob *b = NULL;
        SH_TRY(sh_caffe_blob_find(c, layer, what, blob_name(layer, "bottom", 0), &b));
        SH_TRY(sh_caffe_read(c, layer, what, b));
    } else {
        sh_caffe_blob *b = NULL;
        SH_TRY(read_bottom(c, layer, what, &b));
    }
    if (c->has_softmax)
        return sh_caffe_fail(c, sh_ptx_line(layer), what, "is a second softmax; shoal's net ends with one (drop the "
                             "Softmax of a deploy net from the TRAIN phase)");
    sh_shape in = c->nouts ? c->outs[c->nouts - 1].out : c->input;
    if (c->nouts == 0 || in.h * in.w != 1)
        return sh_caffe_fail(c, sh_ptx_line(layer), what, "softmax over the channels at each of %dx%d positions is not "
                             "mapped: shoal's softmax takes a vector (after an InnerProduct or global pooling)",
                             in.h, in.w);
    sh_caffe_out *o = NULL;
    SH_TRY(sh_caffe_emit(c, "softmax", what, sh_ptx_line(layer), &o));
    c->has_softmax = 1;
    if (sh_ptx_count(layer, "top")) SH_TRY(sh_caffe_blob_set(c, blob_name(layer, "top", 0), c->nouts - 1));
    return SHOAL_OK;
}


static const char *const mapped_types =
    "Input, Data, Convolution, InnerProduct, Pooling, ReLU, Sigmoid, TanH, LRN, Dropout, BatchNorm + Scale, Eltwise, "
    "Concat, Softmax, SoftmaxWithLoss, Accuracy";

shoal_result sh_caffe_map_layer(sh_caffe_conv *c, sh_ptx *layer, const char *type, const char *what)
{
    sh_ptx_skip(layer, "phase");
    if (sh_ptx_count(layer, "blobs"))
        return sh_caffe_fail(c, sh_ptx_nth(layer, "blobs", 0)->line, what, "blobs inside the .prototxt are not read; "
                             "give the weights as --weights FILE.caffemodel");
    for (int i = 0; i < sh_ptx_count(layer, "propagate_down"); i++) {
        int pd = 1;
        sh_ptx_field *f = sh_ptx_nth(layer, "propagate_down", i);
        if (!f->msg && f->text && (!strcmp(f->text, "false") || !strcmp(f->text, "0"))) pd = 0;
        f->used = 1;
        if (!pd) return sh_caffe_fail(c, f->line, what, "propagate_down: false is not mapped: shoal backpropagates "
                                      "through every layer");
    }
    if (!strcmp(type, "Input")) return map_input(c, layer, what);
    if (!strcmp(type, "Data")) return map_data(c, layer, what);
    if (!c->has_input)
        return sh_caffe_fail(c, sh_ptx_line(layer), what, "comes before any Input or Data layer; put the input first");
    if (!strcmp(type, "Convolution")) return map_conv(c, layer, what);
    if (!strcmp(type, "InnerProduct")) return map_ip(c, layer, what);
    if (!strcmp(type, "Pooling")) return map_pool(c, layer, what);
    if (!strcmp(type, "LRN")) return map_lrn(c, layer, what);
    if (!strcmp(type, "Dropout")) return map_dropout(c, layer, what);
    if (!strcmp(type, "ReLU") || !strcmp(type, "Sigmoid") || !strcmp(type, "TanH"))
        return map_activation(c, layer, what, type);
    if (!strcmp(type, "BatchNorm")) return map_batchnorm(c, layer, what);
    if (!strcmp(type, "Scale")) return map_scale(c, layer, what);
    if (!strcmp(type, "Eltwise")) return map_eltwise(c, layer, what);
    if (!strcmp(type, "Concat")) return map_concat(c, layer, what);
    if (!strcmp(type, "Softmax")) return map_softmax(c, layer, what, 0);
    if (!strcmp(type, "SoftmaxWithLoss")) return map_softmax(c, layer, what, 1);
    if (!strcmp(type, "Accuracy")) { /* shoal measures accuracy itself */
        sh_ptx_skip_all(layer);
        for (int i = 0; i < sh_ptx_count(layer, "top"); i++)
            SH_TRY(sh_caffe_blob_set(c, blob_name(layer, "top", i), SH_BLOB_LABEL));
        return SHOAL_OK;
    }
    return sh_caffe_fail(c, sh_ptx_line(layer), what, "type %s has no shoal layer; shoal maps %s", type, mapped_types);
}
