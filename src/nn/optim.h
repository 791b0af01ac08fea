/* optim.h — optimizers (SGD with momentum and weight decay, Adagrad, Adam) and learning-rate
 * policies (Darknet's constant, step, steps, exp, poly, inv, sigmoid, with burn_in).
 * They work on flat float arrays, so the same code updates a whole network (allreduce
 * training) or one server's shard (parameter server).
 * Not here: where gradients come from (net.c), averaging them (src/train).
 * Proved by tests/nn/test_optim.c and tests/nn/test_lr_policy.c. */
#ifndef SH_OPTIM_H
#define SH_OPTIM_H

#include <stddef.h>
#include <stdint.h>
#include "shoal/result.h"

typedef enum { SH_OPTIM_SGD = 0, SH_OPTIM_ADAGRAD, SH_OPTIM_ADAM } sh_optim_kind;

typedef enum {
    SH_LR_CONSTANT = 0, SH_LR_STEP, SH_LR_STEPS, SH_LR_EXP, SH_LR_POLY, SH_LR_INV, SH_LR_SIGMOID
} sh_lr_kind;

#define SH_LR_MAX_STEPS 32

/* The learning-rate schedule, as Darknet's [net] section spells it. */
typedef struct {
    sh_lr_kind kind;
    float base_lr;            /* learning_rate */
    int step;                 /* step policy: every `step` batches, lr *= scale */
    float scale;              /* step policy's scale */
    int nsteps;               /* steps policy */
    int steps[SH_LR_MAX_STEPS];
    float scales[SH_LR_MAX_STEPS];
    float gamma;              /* exp, inv, sigmoid */
    float power;              /* poly, inv; also burn_in's power (Darknet: 4) */
    int max_batches;          /* poly */
    int burn_in;              /* first burn_in batches: lr * (batch/burn_in)^power */
} sh_lr_policy;

/* Learning rate at a batch (0-based), exactly as Darknet's get_current_rate. */
float sh_lr_at(const sh_lr_policy *p, int64_t batch);

/* Optimizer hyper-parameters ([net]: momentum, decay; adam=1 B1 B2 eps; shoal's
 * optimizer=sgd|adagrad|adam). */
typedef struct {
    sh_optim_kind kind;
    float momentum;   /* SGD */
    float decay;      /* L2 weight decay on ranges with decay=1 (not biases, not BN) */
    float beta1, beta2, eps; /* Adam; eps also Adagrad */
} sh_optim_config;

/* A slice of the flat parameter array and whether weight decay applies to it. */
typedef struct {
    size_t offset, count;
    int decay;
} sh_param_range;

typedef struct sh_optim sh_optim;

/* An optimizer over count parameters (offsets 0..count-1 of the arrays passed to step).
 * Copies ranges. State (momentum, moments) is one contiguous block, zeroed. */
shoal_result sh_optim_create(const sh_optim_config *cfg, size_t count, const sh_param_range *ranges,
                             int nranges, sh_optim **out);
void sh_optim_destroy(sh_optim *o);
/* One update: params -= f(grads, state) at learning rate lr. grads are the averaged
 * gradients of the loss (already divided by the batch). Allocates nothing. */
void sh_optim_step(sh_optim *o, float *params /* (count) */, const float *grads /* (count) */,
                   float lr);
/* The same in two parts, so a step can be applied in pieces (each rank of data-parallel
 * training updates its own block, piece by piece as the gradients arrive): begin sets
 * the step's rate (Adam: counts the step), apply updates params[lo, lo + n) from grads[0, n),
 * the gradients of that range. Allocates nothing. */
void sh_optim_begin(sh_optim *o, float lr);
void sh_optim_apply(sh_optim *o, float *params, const float *grads, size_t lo, size_t n);
/* Zero the state of parameters [lo, lo + n) (every moment; not Adam's step count). */
void sh_optim_state_zero(sh_optim *o, size_t lo, size_t n);
/* How many floats at the start of the state block are per-parameter moments (the rest, if
 * any, is Adam's step count). */
size_t sh_optim_moments(const sh_optim *o);
/* Keep the state in the caller's block from now on (sh_optim_state's count floats, aligned,
 * alive as long as o; o does not free it): ranks that take turns stepping one copy of the
 * weights share it in a window. What the block holds is the state; nothing is copied. */
void sh_optim_use_state(sh_optim *o, float *state);
/* The state block (for checkpoints): pointer and length in floats; t (Adam's step count)
 * is part of it. */
float *sh_optim_state(sh_optim *o, size_t *count);

#endif
