/* caffe_net.c — a Caffe .prototxt as shoal's cfg: the TRAIN phase's layers (include/exclude
 * rules) walked in order, each Caffe blob tracked to the shoal layer whose output it is, a
 * [route] added where a layer reads a blob other than the last output, the [net] section
 * filled from the input layer and the solver; the map of layers with blobs kept for the
 * weights. What no shoal layer can do is refused naming path:line, layer and field.
 * Not here: each layer type's fields (caffe_layers.c), the solver (caffe_solver.c).
 * Proved by tests/nn/test_caffe_net.c. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "nn/caffe/caffe_internal.h"

static char *g_solver;        /* sh_caffe_use_solver */
static sh_shape g_data_shape; /* sh_caffe_use_data_shape */

void sh_caffe_use_solver(const char *solver_path)
{
    free(g_solver);
    g_solver = solver_path ? strdup(solver_path) : NULL;
}

const char *sh_caffe_solver_path(void) { return g_solver; }

void sh_caffe_use_data_shape(int c, int h, int w) { g_data_shape = (sh_shape){c, h, w}; }

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

int sh_caffe_is_prototxt(const char *path) { return path && ends_with(path, ".prototxt"); }
int sh_caffe_is_model_path(const char *path) { return path && ends_with(path, ".caffemodel"); }

void sh_caffe_map_free(sh_caffe_map *m)
{
    if (!m) return;
    free(m->v);
    memset(m, 0, sizeof *m);
}

shoal_result sh_caffe_fail(const sh_caffe_conv *c, int line, const char *what, const char *fmt, ...)
{
    char msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: %s: %s", c->path, line, what, msg);
}

/* Warnings said once per file and process: the weights reader converts the file again. */
static struct {
    char path[256];
    unsigned bits;
} g_warned[16];
static pthread_mutex_t g_warned_lock = PTHREAD_MUTEX_INITIALIZER;

static int first_warning(const char *path, unsigned bit)
{
    int first = 1;
    pthread_mutex_lock(&g_warned_lock);
    int slot = -1;
    for (int i = 0; i < 16 && slot < 0; i++)
        if (!strcmp(g_warned[i].path, path) || !g_warned[i].path[0]) slot = i;
    if (slot < 0) slot = 0; /* more files than slots: say them again */
    if (strcmp(g_warned[slot].path, path)) {
        snprintf(g_warned[slot].path, sizeof g_warned[slot].path, "%s", path);
        g_warned[slot].bits = 0;
    }
    first = !(g_warned[slot].bits & bit);
    g_warned[slot].bits |= bit;
    pthread_mutex_unlock(&g_warned_lock);
    return first;
}

void sh_caffe_warn_once(sh_caffe_conv *c, unsigned bit, int line, const char *what, const char *fmt, ...)
{
    if (c->warned & bit) return;
    c->warned |= bit;
    if (!first_warning(c->path, bit)) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    SH_LOG_W("caffe", "%s:%d: %s: %s", c->path, line, what, msg);
}

static shoal_result grow(void **v, int *cap, int need, size_t each)
{
    if (need <= *cap) return SHOAL_OK;
    int ncap = *cap ? 2 * *cap : 16;
    while (ncap < need) ncap *= 2;
    void *p = realloc(*v, (size_t)ncap * each);
    if (!p) return SH_FAIL(SHOAL_ERR_NOMEM, "caffe: out of memory for %d entries", ncap);
    *v = p;
    *cap = ncap;
    return SHOAL_OK;
}

/* --- blobs and emitted layers ------------------------------------------------------------ */

static sh_caffe_blob *blob_lookup(sh_caffe_conv *c, const char *name)
{
    for (int i = c->nblobs - 1; i >= 0; i--)
        if (!strcmp(c->blobs[i].name, name)) return &c->blobs[i];
    return NULL;
}

shoal_result sh_caffe_blob_set(sh_caffe_conv *c, const char *name, int src)
{
    sh_caffe_blob *b = blob_lookup(c, name);
    if (!b) {
        SH_TRY(grow((void **)&c->blobs, &c->cap_blobs, c->nblobs + 1, sizeof *c->blobs));
        b = &c->blobs[c->nblobs++];
        memset(b, 0, sizeof *b);
        snprintf(b->name, sizeof b->name, "%s", name);
    }
    b->src = src;
    b->consumed = 0;
    return SHOAL_OK;
}

shoal_result sh_caffe_blob_find(sh_caffe_conv *c, sh_ptx *layer, const char *what, const char *name,
                                sh_caffe_blob **out)
{
    sh_caffe_blob *b = blob_lookup(c, name);
    if (!b)
        return sh_caffe_fail(c, sh_ptx_line(layer), what, "bottom \"%s\" is no earlier layer's top (in the TRAIN "
                             "phase); check the name or the include rules", name);
    if (b->src == SH_BLOB_STALE)
        return sh_caffe_fail(c, sh_ptx_line(layer), what, "reads \"%s\" as it was before %s, which shoal folds into "
                             "the layer that made it; read %s's top instead", name, b->stale_by, b->stale_by);
    *out = b;
    return SHOAL_OK;
}

shoal_result sh_caffe_emit(sh_caffe_conv *c, const char *kind, const char *what, int line, sh_caffe_out **out)
{
    SH_TRY(grow((void **)&c->outs, &c->cap_outs, c->nouts + 1, sizeof *c->outs));
    sh_caffe_out *o = &c->outs[c->nouts];
    memset(o, 0, sizeof *o);
    SH_TRY(sh_cfg_add_section(c->cfg, kind, line, &o->sec));
    o->kind = kind;
    o->entry = -1;
    o->line = line;
    o->out = c->nouts ? c->outs[c->nouts - 1].out : c->input;
    snprintf(o->caffe, sizeof o->caffe, "%s", what);
    c->nouts++;
    *out = o;
    return SHOAL_OK;
}

shoal_result sh_caffe_key(sh_caffe_out *o, const char *key, const char *fmt, ...)
{
    char val[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(val, sizeof val, fmt, ap);
    va_end(ap);
    return sh_cfg_add_key(o->sec, key, val, o->line);
}

shoal_result sh_caffe_read(sh_caffe_conv *c, sh_ptx *layer, const char *what, sh_caffe_blob *b)
{
    int line = sh_ptx_line(layer);
    if (b->src == SH_BLOB_LABEL)
        return sh_caffe_fail(c, line, what, "reads the labels \"%s\" as data; only SoftmaxWithLoss and Accuracy "
                             "read labels in shoal", b->name);
    b->consumed++;
    if (b->src == SH_BLOB_INPUT) {
        if (c->nouts == 0) return SHOAL_OK;
        return sh_caffe_fail(c, line, what, "reads the input \"%s\" after other layers; shoal's first layer "
                             "alone reads the input", b->name);
    }
    if (b->src == c->nouts - 1) return SHOAL_OK;
    sh_caffe_out *o = NULL;
    int src = b->src;
    SH_TRY(sh_caffe_emit(c, "route", what, line, &o));
    SH_TRY(sh_caffe_key(o, "layers", "%d", src));
    o->out = c->outs[src].out;
    return SHOAL_OK;
}

shoal_result sh_caffe_entry_add(sh_caffe_conv *c, sh_ptx *layer, sh_caffe_role role, int shoal_layer,
                                sh_caffe_entry **out)
{
    *out = NULL;
    if (!c->map) return SHOAL_OK;
    sh_caffe_map *m = c->map;
    SH_TRY(grow((void **)&m->v, &m->cap, m->n + 1, sizeof *m->v));
    sh_caffe_entry *e = &m->v[m->n++];
    memset(e, 0, sizeof *e);
    const char *s = NULL;
    SH_TRY(sh_ptx_str(layer, "layer", "name", "", &s));
    snprintf(e->name, sizeof e->name, "%s", s);
    SH_TRY(sh_ptx_str(layer, "layer", "type", "", &s));
    snprintf(e->type, sizeof e->type, "%s", s);
    sh_ptx_field *f = sh_ptx_nth(layer, "bottom", 0);
    if (f && f->text) snprintf(e->bottom, sizeof e->bottom, "%s", f->text);
    f = sh_ptx_nth(layer, "top", 0);
    if (f && f->text) snprintf(e->top, sizeof e->top, "%s", f->text);
    e->role = role;
    e->layer = shoal_layer;
    *out = e;
    return SHOAL_OK;
}

/* --- phases ------------------------------------------------------------------------------ */

static const char *const phase_names[] = {"TRAIN", "TEST"};

/* 1 when a NetStateRule holds for the TRAIN phase (level 0, no stages). */
static shoal_result rule_meets(sh_caffe_conv *c, sh_ptx *rule, const char *what, int *meets)
{
    int phase = -1;
    SH_TRY(sh_ptx_enum(rule, what, "phase", phase_names, 2, -1, &phase));
    if (sh_ptx_count(rule, "stage") || sh_ptx_count(rule, "not_stage") || sh_ptx_count(rule, "min_level") ||
        sh_ptx_count(rule, "max_level"))
        return sh_caffe_fail(c, sh_ptx_line(rule), what, "include/exclude by stage or level is not mapped: shoal "
                             "builds the TRAIN phase; keep phase: rules only");
    *meets = phase < 0 || phase == 0;
    return SHOAL_OK;
}

static shoal_result in_train_phase(sh_caffe_conv *c, sh_ptx *layer, const char *what, int *yes)
{
    int ninc = sh_ptx_count(layer, "include"), nexc = sh_ptx_count(layer, "exclude");
    if (ninc && nexc)
        return sh_caffe_fail(c, sh_ptx_line(layer), what, "has both include and exclude rules; keep one kind "
                             "(Caffe refuses this too)");
    *yes = ninc == 0;
    for (int i = 0; i < ninc + nexc; i++) {
        sh_ptx_field *f = sh_ptx_nth(layer, ninc ? "include" : "exclude", i);
        f->used = 1;
        if (!f->msg) return sh_caffe_fail(c, f->line, what, "%s is a message: %s { phase: TRAIN }", f->name, f->name);
        int meets = 0;
        SH_TRY(rule_meets(c, f->msg, what, &meets));
        if (meets) *yes = ninc ? 1 : 0;
    }
    return SHOAL_OK;
}

/* --- the walk ---------------------------------------------------------------------------- */

/* The deprecated net-level input: input: "data" with input_shape { dim ... } or input_dim x4. */
static shoal_result net_level_input(sh_caffe_conv *c, sh_ptx *root)
{
    int ninput = sh_ptx_count(root, "input");
    if (!ninput) return SHOAL_OK;
    const char *what = "net input";
    const char *name = NULL;
    SH_TRY(sh_ptx_str(root, what, "input", "", &name));
    if (ninput > 1)
        return sh_caffe_fail(c, sh_ptx_nth(root, "input", 1)->line, what, "more than one input blob; shoal's nets "
                             "have one input");
    long long d[4] = {0};
    sh_ptx *shape = NULL;
    SH_TRY(sh_ptx_msg(root, "input_shape", &shape));
    sh_ptx *from = shape ? shape : root;
    const char *key = shape ? "dim" : "input_dim";
    if (sh_ptx_count(from, key) != 4)
        return sh_caffe_fail(c, sh_ptx_line(from), what, "needs 4 dimensions (N, C, H, W) in %s; found %d", key,
                             sh_ptx_count(from, key));
    for (int i = 0; i < 4; i++) SH_TRY(sh_ptx_int_at(from, what, key, i, 1, 1 << 24, &d[i]));
    c->input = (sh_shape){(int)d[1], (int)d[2], (int)d[3]};
    c->batch = (int)d[0];
    c->has_input = 1;
    return sh_caffe_blob_set(c, name, SH_BLOB_INPUT);
}

/* Activations and batch norm folded in late, and the checks only the whole net can make. */
static shoal_result finish_layers(sh_caffe_conv *c)
{
    for (int i = 0; i < c->nouts; i++) {
        sh_caffe_out *o = &c->outs[i];
        if (o->bn == 2)
            return sh_caffe_fail(c, o->line, o->caffe, "its BatchNorm has no Scale layer after it (with bias_term: "
                                 "true); shoal's batch norm has a scale and shift, add the Scale layer");
        if (o->no_bias && !o->bn)
            return sh_caffe_fail(c, o->line, o->caffe, "bias_term: false without a BatchNorm after it is not mapped: "
                                 "shoal's layer always has a bias; remove bias_term: false");
        if (o->can_act) SH_TRY(sh_caffe_key(o, "activation", "%s", o->act[0] ? o->act : "linear"));
        if (o->bn) SH_TRY(sh_caffe_key(o, "batch_normalize", "1"));
        if (o->entry >= 0 && c->map) c->map->v[o->entry].bn = o->bn != 0;
    }
    return SHOAL_OK;
}

static shoal_result walk(sh_caffe_conv *c, sh_ptx *root)
{
    const char *s = NULL;
    SH_TRY(sh_ptx_str(root, "net", "name", "", &s));
    if (c->map) snprintf(c->map->net_name, sizeof c->map->net_name, "%s", s);
    sh_ptx_skip(root, "force_backward");
    sh_ptx_skip(root, "debug_info");
    sh_ptx_skip(root, "state");
    if (sh_ptx_count(root, "layers"))
        return sh_caffe_fail(c, sh_ptx_nth(root, "layers", 0)->line, "net", "uses Caffe's V1 \"layers\" format; "
                             "upgrade it with Caffe's upgrade_net_proto_text (its layers are \"layer\")");
    SH_TRY(net_level_input(c, root));
    for (int i = 0; i < sh_ptx_count(root, "layer"); i++) {
        sh_ptx_field *f = sh_ptx_nth(root, "layer", i);
        f->used = 1;
        if (!f->msg) return sh_ptx_fail(root, f->line, "layer is a message: layer { name: ... type: ... }");
        sh_ptx *layer = f->msg;
        const char *name = NULL, *type = NULL;
        SH_TRY(sh_ptx_str(layer, "layer", "name", "", &name));
        SH_TRY(sh_ptx_str(layer, "layer", "type", "", &type));
        char what[2 * SH_CAFFE_NAME + 48];
        snprintf(what, sizeof what, "layer '%s' (%s)", name, type);
        if (!type[0]) return sh_caffe_fail(c, f->line, what, "has no type; add type: \"Convolution\" or another");
        int yes = 1;
        SH_TRY(in_train_phase(c, layer, what, &yes));
        if (!yes) {
            sh_ptx_skip_all(layer); /* left out whole by its phase */
            continue;
        }
        SH_TRY(sh_caffe_map_layer(c, layer, type, what));
        char field[256];
        int line = 0;
        if (sh_ptx_first_unread(layer, field, sizeof field, &line))
            return sh_caffe_fail(c, line, what, "field %s is not mapped by shoal; remove it, or train this model "
                                 "with Caffe", field);
    }
    char field[256];
    int line = 0;
    if (sh_ptx_first_unread(root, field, sizeof field, &line))
        return sh_caffe_fail(c, line, "net", "field %s is not mapped by shoal; remove it", field);
    if (!c->has_input)
        return sh_caffe_fail(c, 1, "net", "has no Input or Data layer (TRAIN phase); add one with the input's shape");
    if (c->nouts == 0) return sh_caffe_fail(c, 1, "net", "has no layer shoal runs after its input");
    return finish_layers(c);
}

/* [net]: the input's shape and batch (Caffe's iter_size as Darknet's subdivisions: the same
 * gradient over batch x iter_size images), then the solver's keys. */
static shoal_result fill_net_section(sh_caffe_conv *c, sh_ptx *solver)
{
    int iter_size = 1;
    if (solver) SH_TRY(sh_caffe_solver_apply(solver, c->net, &iter_size));
    int batch = c->batch > 0 ? c->batch : 1;
    char v[32];
    snprintf(v, sizeof v, "%d", batch * iter_size);
    SH_TRY(sh_cfg_add_key(c->net, "batch", v, 1));
    if (iter_size > 1) {
        snprintf(v, sizeof v, "%d", iter_size);
        SH_TRY(sh_cfg_add_key(c->net, "subdivisions", v, 1));
    }
    snprintf(v, sizeof v, "%d", c->input.w);
    SH_TRY(sh_cfg_add_key(c->net, "width", v, 1));
    snprintf(v, sizeof v, "%d", c->input.h);
    SH_TRY(sh_cfg_add_key(c->net, "height", v, 1));
    snprintf(v, sizeof v, "%d", c->input.c);
    SH_TRY(sh_cfg_add_key(c->net, "channels", v, 1));
    return SHOAL_OK;
}

shoal_result sh_caffe_convert(const char *path, const char *solver_path, sh_cfg **cfg_out, sh_caffe_map *map)
{
    shoal_result rc = SHOAL_OK;
    sh_ptx *root = NULL, *solver = NULL, *net = NULL;
    sh_caffe_conv c;
    memset(&c, 0, sizeof c);
    if (cfg_out) *cfg_out = NULL;
    if (map) memset(map, 0, sizeof *map);
    char net_path[1024];
    SH_TRY_GOTO(sh_ptx_load(path, &root), rc, done);
    if (sh_caffe_is_solver(root)) { /* a solver naming its net */
        SH_TRY_GOTO(sh_caffe_solver_net(root, net_path, sizeof net_path), rc, done);
        SH_TRY_GOTO(sh_ptx_load(net_path, &net), rc, done);
        if (!solver_path) {
            solver = root;
            root = NULL;
        }
        path = net_path;
    } else {
        net = root;
        root = NULL;
    }
    if (solver_path) SH_TRY_GOTO(sh_ptx_load(solver_path, &solver), rc, done);
    c.path = path;
    c.map = map;
    c.input = g_data_shape; /* for a Data layer */
    SH_TRY_GOTO(sh_cfg_create(path, &c.cfg), rc, done);
    SH_TRY_GOTO(sh_cfg_add_section(c.cfg, "net", 1, &c.net), rc, done);
    SH_TRY_GOTO(walk(&c, net), rc, done);
    SH_TRY_GOTO(fill_net_section(&c, solver), rc, done);
    if (cfg_out) {
        *cfg_out = c.cfg;
        c.cfg = NULL;
    }
done:
    if (rc != SHOAL_OK && map) sh_caffe_map_free(map);
    sh_cfg_destroy(c.cfg);
    free(c.blobs);
    free(c.outs);
    if (solver != root) sh_ptx_destroy(solver);
    sh_ptx_destroy(root);
    sh_ptx_destroy(net);
    return rc;
}

shoal_result sh_caffe_cfg_load(const char *path, sh_cfg **out)
{
    return sh_caffe_convert(path, g_solver, out, NULL);
}
