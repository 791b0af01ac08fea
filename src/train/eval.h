/* eval.h — accuracy and mean loss of a network over a whole dataset, in inference mode,
 * through the net or through a strategy's pass.
 * Not here: training (step.c), where the dataset comes from (src/data).
 * Proved by tests/train/test_trainer.c; the pass by test_pipeline.c and test_hybrid.c. */
#ifndef SH_EVAL_H
#define SH_EVAL_H

#include <stdint.h>
#include "data/data.h"
#include "nn/net.h"
#include "shoal/result.h"
#include "train/strategy.h"

/* SHOAL_OK when d's images have the net's shape (text for a character-level net) and, when
 * labelled, its labels are classes the net outputs; else SHOAL_ERR_INVALID naming both
 * shapes, or the labels file, the label and its image. */
shoal_result sh_eval_check_data(const sh_dataset *d, const sh_net *net, const char *cfg, int labelled);

/* Forward every image the loader yields in one epoch (it must not shuffle nor drop the last
 * batch), nimg <= the net's batch at a time, through x (N, C, H, W) and y (N) buffers the
 * caller owns. accuracy in [0, 1]; loss is the mean cross-entropy per image. */
shoal_result sh_eval_run(sh_net *net, sh_loader *loader, float *x, int32_t *y,
                         double *accuracy, double *loss);

/* The same as sums over whatever the loader yields (one rank's shard): images, correct
 * predictions, summed per-image loss. */
shoal_result sh_eval_sums(sh_net *net, sh_loader *loader, float *x, int32_t *y, int64_t *nimages,
                          int64_t *ncorrect, double *loss_sum);
/* sh_eval_sums through s's pass (a pipeline: the batch goes through its stages), called for
 * every batch, empty ones included (strategy.h). */
shoal_result sh_eval_sums_pass(sh_strategy *s, sh_loader *loader, float *x, int32_t *y, int64_t *nimages,
                               int64_t *ncorrect, double *loss_sum);

#endif
