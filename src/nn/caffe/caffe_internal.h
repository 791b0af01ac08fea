/* caffe_internal.h — what the Caffe files share: the converter's state while it walks a
 * model's layers, and the map from Caffe's layers with blobs to shoal's layers that the
 * weights reader and writer follow.
 * Not here: the public entry points (caffe.h).
 * Proved by tests/nn/test_caffe_net.c and tests/nn/test_caffe_model.c. */
#ifndef SH_CAFFE_INTERNAL_H
#define SH_CAFFE_INTERNAL_H

#include "nn/caffe/caffe.h"
#include "nn/caffe/prototxt.h"
#include "nn/cfg.h"
#include "nn/tensor.h"

#define SH_CAFFE_NAME 128

/* A Caffe layer with blobs and where they go in shoal. */
typedef enum {
    SH_CAFFE_CONV,   /* W (F, C/g, k, k), b (F): a [convolutional] */
    SH_CAFFE_IP,     /* W (K, I), b (K): a [connected] */
    SH_CAFFE_BN,     /* mean (C), variance (C), scale factor (1): its batch_normalize */
    SH_CAFFE_SCALE,  /* gamma (C), beta (C): its batch_normalize's scales and shift */
} sh_caffe_role;

typedef struct {
    char name[SH_CAFFE_NAME], type[32];
    char bottom[SH_CAFFE_NAME], top[SH_CAFFE_NAME];
    sh_caffe_role role;
    int layer;       /* shoal layer index */
    int bias_term;   /* CONV, IP: Caffe has a bias blob */
    int bn;          /* CONV, IP: batch norm follows (a bias folds into its mean) */
    int kh, kw;      /* CONV: kernel */
} sh_caffe_entry;

typedef struct {
    sh_caffe_entry *v;
    int n, cap;
    char net_name[SH_CAFFE_NAME];
} sh_caffe_map;

void sh_caffe_map_free(sh_caffe_map *m);

/* One blob of the graph: which shoal layer's output it is. */
enum { SH_BLOB_INPUT = -1, SH_BLOB_LABEL = -2, SH_BLOB_STALE = -3 };
typedef struct {
    char name[SH_CAFFE_NAME];
    int src;         /* shoal layer index, or SH_BLOB_* */
    int consumed;    /* read by some layer already */
    char stale_by[SH_CAFFE_NAME]; /* SH_BLOB_STALE: the in-place layer that changed it */
} sh_caffe_blob;

/* A shoal layer the converter emitted. */
typedef struct {
    sh_cfg_section *sec;
    const char *kind;      /* "convolutional", ... */
    sh_shape out;
    char act[16];          /* "" until a Caffe activation folds into it */
    int can_act;           /* conv, connected, shortcut: takes an activation */
    int bn;                /* batch norm folded in; 2: waiting for its Scale */
    int no_bias;           /* Caffe has no bias: only allowed with batch norm */
    int entry;             /* its map entry (CONV/IP), -1 */
    char caffe[SH_CAFFE_NAME];
    int line;
} sh_caffe_out;

typedef struct {
    const char *path;
    sh_cfg *cfg;
    sh_cfg_section *net;
    sh_caffe_blob *blobs;
    int nblobs, cap_blobs;
    sh_caffe_out *outs;
    int nouts, cap_outs;
    sh_shape input;
    int has_input, batch, has_softmax;
    sh_caffe_map *map;
    unsigned warned;       /* SH_CAFFE_WARN_* bits already said */
} sh_caffe_conv;

enum { SH_CAFFE_WARN_LR = 1, SH_CAFFE_WARN_FILLER = 2, SH_CAFFE_WARN_BN = 4, SH_CAFFE_WARN_SCALE = 8,
       SH_CAFFE_WARN_SOURCE = 16 };

/* caffe_net.c: the graph */
shoal_result sh_caffe_blob_find(sh_caffe_conv *c, sh_ptx *layer, const char *what, const char *name,
                                sh_caffe_blob **out);
shoal_result sh_caffe_blob_set(sh_caffe_conv *c, const char *name, int src);
/* Make the layer about to be emitted read blob b: nothing when b is the last output, else a
 * [route] of it. */
shoal_result sh_caffe_read(sh_caffe_conv *c, sh_ptx *layer, const char *what, sh_caffe_blob *b);
/* Append a shoal section of kind for Caffe layer what (line). */
shoal_result sh_caffe_emit(sh_caffe_conv *c, const char *kind, const char *what, int line, sh_caffe_out **out);
shoal_result sh_caffe_key(sh_caffe_out *o, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
shoal_result sh_caffe_entry_add(sh_caffe_conv *c, sh_ptx *layer, sh_caffe_role role, int shoal_layer,
                                sh_caffe_entry **out);
/* "path:line: layer 'name' (Type): " + message, SHOAL_ERR_FORMAT. */
shoal_result sh_caffe_fail(const sh_caffe_conv *c, int line, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void sh_caffe_warn_once(sh_caffe_conv *c, unsigned bit, int line, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* caffe_layers.c: one Caffe layer (what: "layer 'conv1' (Convolution)") onto shoal's. */
shoal_result sh_caffe_map_layer(sh_caffe_conv *c, sh_ptx *layer, const char *type, const char *what);

/* caffe_solver.c: a solver's hyperparameters into [net]; *iter_size: Caffe's iter_size (1). */
shoal_result sh_caffe_solver_apply(sh_ptx *solver, sh_cfg_section *net, int *iter_size);
/* The net a solver names (net, train_net), resolved as sh_caffe_cfg_load says; "" if none. */
shoal_result sh_caffe_solver_net(sh_ptx *solver, char *path, size_t path_nbytes);
int sh_caffe_is_solver(const sh_ptx *root);
const char *sh_caffe_solver_path(void);

/* The whole conversion: cfg (may be NULL: the map only) and the map (may be NULL). */
shoal_result sh_caffe_convert(const char *path, const char *solver_path, sh_cfg **cfg, sh_caffe_map *map);

#endif
