/* layout_cfgs.h — the small nets the parallel-layout tests (pipeline, tensor, both) train
 * in more than one test: each a cfg's text, to write into the test's directory.
 * Not here: the runs and what they check (each test, layout_checks.h).
 * Used by tests/train/test_tensor.c, test_pipeline_tp.c and tests/cli/test_train_tensor.c,
 * test_train_pipeline_tp.c. */
#ifndef SH_TEST_LAYOUT_CFGS_H
#define SH_TEST_LAYOUT_CFGS_H

/* The [net] section of an 8x8x1 net with a batch of 16: SGD with momentum 0.9 at rate lr
 * (a string), then what follows in `more`. */
#define SH_TEST_NET_8X8(lr, more) "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=" lr "\n" more

/* Two stages of [connected] layers, a pair worth splitting in each (layers 0 + 1, 2 + 3: per
 * image 2816 multiply-adds for 96 bytes, 3584 for 224; 3 + 4 costs more than it saves). */
#define SH_TEST_STAGED_CFG                                                                   \
    SH_TEST_NET_8X8("0.05", "momentum=0.9\n")                                                \
    "\n[connected]\noutput=32\nactivation=relu\nstage=0\n"                                   \
    "\n[connected]\noutput=24\nactivation=relu\n"                                            \
    "\n[connected]\noutput=64\nactivation=relu\nstage=1\n"                                   \
    "\n[connected]\noutput=32\nactivation=relu\n"                                            \
    "\n[connected]\noutput=4\nactivation=linear\n"                                           \
    "\n[softmax]\n\n[cost]\n"

/* Odd output counts: nothing to split across 2 ranks. */
#define SH_TEST_ODD_CFG                                                                      \
    SH_TEST_NET_8X8("0.05", "")                                                              \
    "\n[connected]\noutput=7\nactivation=relu\n"                                             \
    "\n[connected]\noutput=5\nactivation=relu\n"                                             \
    "\n[connected]\noutput=4\nactivation=linear\n"                                           \
    "\n[softmax]\n\n[cost]\n"

/* A CNN: conv 0 (Winograd) + conv 1 (pad 0: im2col, images grouped) by output then input
 * channels, conv 2 (Winograd) + connected 4 through maxpool 3 on the share, dropout after;
 * conv 1 + conv 2 would save more alone but overlaps both. S0, S1: the first and the third
 * layer's stage keys ("" without a pipeline; a pipeline cut before conv 2 leaves each stage
 * one pair). */
#define SH_TEST_CNN_LAYERS(S0, S1)                                                                      \
    "\n[convolutional]\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=relu\n" S0                      \
    "\n[convolutional]\nfilters=8\nsize=3\nstride=1\npad=0\nactivation=leaky\n"                        \
    "\n[convolutional]\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=relu\n" S1                      \
    "\n[maxpool]\nsize=2\nstride=2\n"                                                                    \
    "\n[connected]\noutput=16\nactivation=relu\n"                                                        \
    "\n[dropout]\nprobability=.2\n"                                                                       \
    "\n[connected]\noutput=4\nactivation=linear\n"                                                       \
    "\n[softmax]\n\n[cost]\n"

#endif
