/* dp/compress.h — the compressed exchange of a net's gradients (a compressor per layer's
 * weights and biases, or a connected layer's sufficient factors) and the error-feedback
 * state a checkpoint keeps per rank.
 * Not here: the codecs and the collective (src/comm/compress/), when it runs (dp/allreduce.c, mp/mp.c).
 * Proved by tests/train/test_compress_train.c. */
#ifndef SH_GRAD_COMPRESS_H
#define SH_GRAD_COMPRESS_H

#include "nn/net.h"
#include "nn/optim.h"
#include "shoal/comm.h"

typedef struct {
    shoal_codec_opts codec; /* SHOAL_CODEC_NONE: float32 allreduce */
    int sfb;                /* sufficient factors for connected layers where they are smaller */
    const char *model;      /* the .cfg, for messages */
    int sum;                /* 1: the ranks' gradients are summed (each already a share of the
                               batch's mean); 0: averaged */
    int sfb_only;           /* with sfb: only the factors' layers are exchanged; the rest stays as
                               backward left it (--ps --sfb: the servers take it) */
} sh_gradx_opts;

typedef struct {
    double wire_nbytes;     /* bytes this rank sends per step (the algorithms' count) */
    double dense_nbytes;    /* what a float32 ring allreduce of every gradient would send */
    double residual_norm;   /* of every residual after the last step */
    int sfb_layers;         /* connected layers that send factors */
} sh_gradx_stats;

typedef struct sh_gradx sh_gradx;

/* 1 when layer's weights travel as sufficient factors under --sfb (a [connected] layer where
 * batch x (inputs + outputs) < inputs x outputs at the net's batch), with their slice of the
 * parameter block; the rule every rank and server applies alike. */
int sh_gradx_sends_factors(sh_net *net, int layer, size_t *w_off, size_t *wn);

/* Plan the exchange for net on c. Errors: SHOAL_ERR_INVALID with one line for --sfb on a
 * model with no connected layer; SHOAL_ERR_NOMEM. Collective: no (the plan is a function of
 * the model and options, the same on every rank). */
shoal_result sh_gradx_create(shoal_comm *c, sh_net *net, const sh_gradx_opts *o, sh_gradx **out);
void sh_gradx_destroy(sh_gradx *g);
/* Before backward: this step's gradient block (the net's). The exchange of a layer starts,
 * on the exchange's own thread, as soon as backward reports it final, layers last to
 * first; the communicator must not be used by others until sh_gradx_reduce returns. */
void sh_gradx_begin(sh_gradx *g, float *grads);
/* Backward's grad_ready for layer i: keeps the factors of a layer that sends them and
 * starts the layer's exchange. */
void sh_gradx_layer_ready(sh_gradx *g, int layer);
/* Wait until every layer's gradients in grads (the net's gradient block) are the mean over
 * the ranks (those backward did not report are exchanged now). Collective, blocking. */
shoal_result sh_gradx_reduce(sh_gradx *g, float *grads);
/* Seconds the exchange thread spent exchanging, summed over the steps. */
double sh_gradx_busy_s(const sh_gradx *g);
void sh_gradx_get_stats(const sh_gradx *g, sh_gradx_stats *out);

/* 1 where the exchange sends momentum-corrected velocities (topk with SGD and momentum):
 * the caller then steps with sh_gradx_apply in place of the optimizer. */
int sh_gradx_applies_update(const sh_gradx *g);
/* After sh_gradx_reduce: w -= lr * grads where the velocities were exchanged, the
 * optimizer's step (at lr) elsewhere: sufficient factors, and the parameters past the
 * exchanged layers up to nparams (a hybrid's model-parallel part). */
void sh_gradx_apply(sh_gradx *g, sh_optim *opt, float *params, const float *grads, size_t nparams, float lr);

/* The per-rank state (residuals, lowrank's Q, velocities): count floats, copied out and in. */
size_t sh_gradx_state_count(const sh_gradx *g);
void sh_gradx_state_get(sh_gradx *g, float *out);
void sh_gradx_state_set(sh_gradx *g, const float *in);
void sh_gradx_state_reset(sh_gradx *g);

#endif
