/* targets.c — what a net that learns without labels compares its output with: a regression
 * (the net ends in [cost] type=sse, L1 or smooth) against the input itself (--target input:
 * an autoencoder) or against a second data set (--target DIR, found as --data's is: its
 * training and test files, item for item with the data's), checked against the net's output
 * and handed to the loaders and the net. A pretraining net ([rbm] CD) needs none; a net with
 * labels takes none.
 * Not here: the losses (src/nn/net_unlabelled.c), reading data sets (src/data).
 * Proved by tests/cli/test_train_unlabelled.c. */
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "train/trainer_internal.h"

static shoal_result target_fits(const sh_dataset *d, const sh_net *net, const char *cfg)
{
    int count = d->c * d->h * d->w;
    if (count != sh_net_nclasses(net))
        return SH_FAIL(SHOAL_ERR_INVALID, "--target: %s has %dx%dx%d images (%d values) but %s outputs %d values per "
                       "image; give targets of the net's output shape", d->name, d->c, d->h, d->w, count, cfg,
                       sh_net_nclasses(net));
    return SHOAL_OK;
}

shoal_result sh_trainer_open_targets(sh_trainer *t)
{
    const char *target = t->opts.target, *cfg = t->opts.cfg_path;
    if (sh_net_has_labels(t->net) || sh_net_pretraining(t->net) >= 0) {
        if (!target) return SHOAL_OK;
        return SH_FAIL(SHOAL_ERR_INVALID, "--target %s: %s %s; leave out --target", target, cfg,
                       sh_net_pretraining(t->net) >= 0 ? "pretrains an [rbm], which needs no targets"
                                                       : "learns from the data's labels (it ends in [softmax])");
    }
    if (!sh_net_is_regression(t->net)) return SHOAL_OK; /* sh_net_check_trainable said why not */
    if (!target)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s ends in a regression [cost]: give its targets with --target input (the "
                       "input itself: an autoencoder) or --target DIR (a data set of target images, as --data)", cfg);
    if (t->text)
        return SH_FAIL(SHOAL_ERR_INVALID, "--target: %s is text, read as characters with labels; a regression "
                       "needs images", t->opts.data_dir);
    if (t->strategy->ops->pass)
        return SH_FAIL(SHOAL_ERR_INVALID, "--target: a regression trains alone or data parallel (-n N), with --ps or "
                       "--tensor-parallel; --pipeline and --hybrid pass labels between ranks, not targets");
    if (!strcmp(target, "input")) return sh_net_set_target(t->net, NULL);
    SH_TRY(sh_dataset_open_dir(target, 1, &t->train_target));
    SH_TRY(sh_dataset_open_dir(target, 0, &t->test_target));
    SH_TRY(target_fits(t->train_target, t->net, cfg));
    SH_TRY(target_fits(t->test_target, t->net, cfg));
    SH_TRY(sh_alloc_aligned((size_t)t->batch * (size_t)sh_net_nclasses(t->net) * sizeof(float), (void **)&t->target));
    return sh_net_set_target(t->net, t->target);
}
