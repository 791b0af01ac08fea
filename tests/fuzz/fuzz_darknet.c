/* fuzz_darknet.c — libFuzzer target: arbitrary files through Darknet's .weights reader
 * (src/nn/darknet_weights.c, sh_darknet_weights_load, what --weights FILE.weights reads) into
 * one of three small nets built once from fixed cfgs: a classifier (convolutional and
 * connected layers with batch_normalize, their rolling statistics), a recurrent stack ([rnn],
 * [gru] form=darknet, [lstm]: gate matrices scattered through fused ones), and a PyTorch-form
 * [gru], which the reader must refuse before it reads anything.
 * Input: net u8 (mod 3) · the file. A file the reader accepts must be exactly the size the
 * net's layers take (with a 64- or a 32-bit images-seen field): anything else accepted is a
 * finding, like a crash. Not here: the layers' arrays (layer_*.c), saving (round trips are
 * tests/nn/test_darknet_weights.c). Driven by scripts/fuzz.sh and tests/fuzz/test_fuzz_darknet.c. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "nn/cfg.h"
#include "nn/darknet_weights.h"
#include "nn/net.h"

static const char *const fuzz_dn_cfgs[] = {
    "[net]\nbatch=1\nchannels=2\nheight=4\nwidth=4\n"
    "[convolutional]\nfilters=2\nsize=3\npad=1\nbatch_normalize=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[connected]\noutput=3\nbatch_normalize=1\nactivation=leaky\n"
    "[connected]\noutput=2\nactivation=linear\n[softmax]\n",
    "[net]\nbatch=2\ninputs=3\ntime_steps=2\n"
    "[rnn]\noutput=3\nhidden=2\nactivation=leaky\n"
    "[gru]\noutput=2\nform=darknet\n"
    "[lstm]\noutput=2\n"
    "[connected]\noutput=3\nactivation=linear\n[softmax]\n",
    "[net]\nbatch=2\ninputs=3\ntime_steps=2\n[gru]\noutput=2\n[connected]\noutput=3\n",
};
enum { FUZZ_DN_NETS = 3 };
static sh_net *fuzz_dn_nets[FUZZ_DN_NETS];

static sh_net *fuzz_dn_net(int k)
{
    if (fuzz_dn_nets[k]) return fuzz_dn_nets[k];
    sh_cfg *cfg = NULL;
    if (sh_cfg_parse(fuzz_dn_cfgs[k], "fuzz-darknet.cfg", &cfg) != SHOAL_OK) abort();
    if (sh_net_create_owning(cfg, 0, 1, &fuzz_dn_nets[k]) != SHOAL_OK) abort();
    return fuzz_dn_nets[k];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    sh_net *net = fuzz_dn_net(data[0] % FUZZ_DN_NETS);
    char path[128];
    fuzz_write(fuzz_path("fuzz.weights", path, sizeof path), data + 1, size - 1, 0);
    uint64_t seen = UINT64_MAX;
    if (sh_darknet_weights_load(net, path, &seen) == SHOAL_OK) {
        /* accepted: the whole file was the header and the layers' arrays, nothing else */
        uint64_t want = sh_darknet_weights_nbytes(net);
        if (size - 1 != want && size - 1 != want - 4) abort();
        if (seen == UINT64_MAX && size - 1 == want - 4) abort(); /* a 32-bit count is < 2^32 */
    }
    return 0;
}
