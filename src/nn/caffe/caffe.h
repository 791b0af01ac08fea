/* caffe.h — Caffe's files for the rest of shoal: a .prototxt model read as a cfg (the same
 * layers the .cfg reader builds), its solver's hyperparameters, and .caffemodel weights read
 * into and written from a net built from that .prototxt.
 * Not here: the text format (prototxt.c), the mapping (caffe_net.c, caffe_layers.c,
 * caffe_solver.c), the binary weights (caffe_model.c).
 * Proved by tests/nn/test_caffe_*.c. */
#ifndef SH_CAFFE_H
#define SH_CAFFE_H

#include "nn/cfg.h"
#include "shoal/result.h"

typedef struct sh_net sh_net;

/* 1 for a path ending in ".prototxt": sh_cfg_load reads it through sh_caffe_cfg_load. */
int sh_caffe_is_prototxt(const char *path);
/* 1 for a path ending in ".caffemodel". */
int sh_caffe_is_model_path(const char *path);

/* A Caffe model as shoal's cfg: the TRAIN phase's layers (include/exclude rules) mapped onto
 * shoal's sections, messages naming path:line of the Caffe layer and field. path may also be
 * a solver (.prototxt with net: or train_net:), whose net is read (relative to the current
 * directory, as Caffe does, else to the solver's). What cannot be mapped is SHOAL_ERR_FORMAT
 * naming the layer and the field; what shoal does differently but harmlessly (lr_mult,
 * fillers) is one warning line each. */
shoal_result sh_caffe_cfg_load(const char *path, sh_cfg **out);

/* Process-wide settings for the .prototxt models read afterwards (the command line sets
 * them before the job starts; not thread-safe). solver: a solver .prototxt whose
 * hyperparameters fill [net] (NULL: none, shoal's defaults). Data layers have no shape: it
 * is the dataset's (c, h, w), set here from the data the job reads (0s: unknown, and a Data
 * layer is then refused naming what to do). */
void sh_caffe_use_solver(const char *solver_path);
void sh_caffe_use_data_shape(int c, int h, int w);

/* The solver's settings that are not the model's: snapshot every N iterations and its
 * prefix, random_seed (-1: none), test_interval. Reads the solver set by sh_caffe_use_solver
 * (or the one path names); all 0 / NULL when none. prefix is copied into prefix (cap bytes). */
typedef struct {
    long long snapshot, test_interval, random_seed, max_iter;
    char prefix[512];
} sh_caffe_run;
shoal_result sh_caffe_solver_run(const char *model_path, sh_caffe_run *out);

/* Read .caffemodel weights into a net built from a .prototxt (sh_net_cfg_path): layers are
 * matched by name as Caffe's CopyTrainedLayersFrom does (a net layer missing from the file
 * keeps its weights, said once); a blob's shape must match. SHOAL_ERR_FORMAT names the file,
 * layer and blob. */
shoal_result sh_caffe_weights_load(sh_net *net, const char *path);
/* Write the net's weights as a .caffemodel Caffe reads (NetParameter with one layer per
 * Caffe layer that has blobs; BatchNorm's scale factor 1). */
shoal_result sh_caffe_weights_save(sh_net *net, const char *path);

#endif
