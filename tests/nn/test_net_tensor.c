/* test_net_tensor.c — proves src/nn/net_tensor.c's choices by the layers' capabilities
 * (layer.h's SH_LAYER_* bits): which pairs a tensor layout may split (sh_net_tp_pair_end:
 * pooling only between convolutional layers, no grouped convolution, no convolutional row
 * after a connected column, no batch norm, ranks dividing the outputs, nothing reading across)
 * and where a hybrid layout cuts (sh_net_hybrid_plan: its roles and its refusals); and that
 * each layer kind says what it can do, narrowed by its options. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "nn/cfg.h"
#include "nn/layer.h"
#include "nn/net.h"

typedef struct {
    sh_cfg *cfg;
    sh_net *net;
} test_net;

static int tn_build(test_net *t, const char *text, int batch, uint64_t seed)
{
    t->net = NULL;
    shoal_result rc = sh_cfg_parse(text, "test.cfg", &t->cfg);
    if (rc == SHOAL_OK) rc = sh_net_create(t->cfg, batch, seed, &t->net);
    CHECK(rc == SHOAL_OK, "building net: %s", shoal_last_error());
    if (rc != SHOAL_OK) sh_cfg_destroy(t->cfg);
    return rc == SHOAL_OK;
}

static void tn_free(test_net *t)
{
    sh_net_destroy(t->net);
    sh_cfg_destroy(t->cfg);
}

#define NET "[net]\nbatch=2\nchannels=4\nheight=8\nwidth=8\n"
#define CONV(f) "[convolutional]\nfilters=" #f "\nsize=3\npad=1\nactivation=relu\n"

/* sh_net_tp_pair_end(i, ranks) of the net in text, -2 when it does not build. */
static int pair_end(const char *text, int i, int ranks)
{
    test_net t;
    if (!tn_build(&t, text, 2, 1)) return -2;
    int j = sh_net_tp_pair_end(t.net, i, ranks);
    tn_free(&t);
    return j;
}

static void pairs_follow_the_layers_capabilities(void)
{
    CHECK(pair_end(NET CONV(8) CONV(4) "[softmax]\n", 0, 2) == 1, "conv -> conv");
    CHECK(pair_end(NET CONV(8) "[maxpool]\nsize=2\nstride=2\n[avgpool]\n[connected]\noutput=6\n[softmax]\n", 0, 2) == 3,
          "conv -> pools -> connected");
    CHECK(pair_end(NET CONV(8) "[maxpool]\nsize=2\nstride=2\n" CONV(4) "[softmax]\n", 0, 2) == 2,
          "conv -> maxpool -> conv");
    CHECK(pair_end(NET "[connected]\noutput=8\n[connected]\noutput=6\n[softmax]\n", 0, 2) == 1,
          "connected -> connected");
    /* a connected column's outputs are not channels a convolutional row share could read */
    CHECK(pair_end(NET "[connected]\noutput=8\n[convolutional]\nfilters=4\nsize=1\n[softmax]\n", 0, 2) == -1,
          "connected -> conv refused");
    /* pooling passes a share only after a convolutional column (its channels) */
    CHECK(pair_end(NET "[connected]\noutput=8\n[maxpool]\nsize=1\n[connected]\noutput=6\n[softmax]\n", 0, 2) == -1,
          "connected -> maxpool refused");
    CHECK(pair_end(NET "[convolutional]\nfilters=8\nsize=3\npad=1\ngroups=2\n" CONV(4) "[softmax]\n", 0, 2) == -1,
          "grouped column refused");
    CHECK(pair_end(NET CONV(8) "[convolutional]\nfilters=4\nsize=3\npad=1\ngroups=2\n[softmax]\n", 0, 2) == -1,
          "grouped row refused");
    CHECK(pair_end(NET CONV(8) "[dropout]\n" CONV(4) "[softmax]\n", 0, 2) == -1, "dropout between refused");
    CHECK(pair_end(NET "[connected]\noutput=8\nbatch_normalize=1\n[connected]\noutput=6\n[softmax]\n", 0, 2) == -1,
          "batch norm refused");
    CHECK(pair_end(NET CONV(9) CONV(4) "[softmax]\n", 0, 2) == -1, "2 ranks do not divide 9 filters");
    CHECK(pair_end(NET CONV(9) CONV(4) "[softmax]\n", 0, 3) == 1, "3 ranks divide 9 filters");
    CHECK(pair_end(NET CONV(8) CONV(8) "[shortcut]\nfrom=-2\n[softmax]\n", 0, 2) == -1, "read across refused");
    CHECK(pair_end(NET CONV(8) CONV(4) "[softmax]\n", 1, 2) == -1, "softmax is no row");
}

static void hybrid_cuts_before_the_first_gather_layer(void)
{
    test_net t;
    if (!tn_build(&t, NET CONV(8) "[maxpool]\nsize=2\nstride=2\n[connected]\noutput=8\n[dropout]\n"
                      "[connected]\noutput=6\n[softmax]\n", 2, 1)) return;
    unsigned char roles[6];
    int cut = -1;
    CHECK_OK(sh_net_hybrid_plan(t.net, 2, &cut, roles));
    CHECK(cut == 2, "cut %d", cut);
    static const unsigned char want[6] = {0, 0, SH_TP_GATHER, 0, SH_TP_GATHER, 0};
    CHECK(memcmp(roles, want, sizeof want) == 0, "roles %d %d %d %d %d %d", roles[0], roles[1], roles[2], roles[3],
          roles[4], roles[5]);
    CHECK_RC(sh_net_hybrid_plan(t.net, 7, &cut, roles), SHOAL_ERR_INVALID); /* 6 outputs, 7 ranks */
    CHECK(strstr(shoal_last_error(), "fewer than the 7") != NULL, "%s", shoal_last_error());
    tn_free(&t);
    if (!tn_build(&t, NET CONV(8) "[softmax]\n", 2, 1)) return;
    CHECK_RC(sh_net_hybrid_plan(t.net, 2, &cut, roles), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error(), "no [connected] layer") != NULL, "%s", shoal_last_error());
    tn_free(&t);
}

/* caps of layer i of the net in text. */
static unsigned caps_of(const char *text, int i)
{
    test_net t;
    if (!tn_build(&t, text, 2, 1)) return ~0u;
    unsigned c = sh_net_layer(t.net, i)->caps;
    tn_free(&t);
    return c;
}

static void layers_say_what_they_can_do(void)
{
    unsigned dense = SH_LAYER_SPLIT_COLUMN | SH_LAYER_SPLIT_ROW | SH_LAYER_GATHER | SH_LAYER_PACKED_WEIGHTS |
                     SH_LAYER_FACTORS | SH_LAYER_ACTIVATION;
    const char *text = NET CONV(8) "[maxpool]\nsize=2\nstride=2\n[avgpool]\n[dropout]\n[connected]\noutput=6\n"
                           "[softmax]\n[cost]\n";
    CHECK(caps_of(text, 0) == (SH_LAYER_SPLIT_COLUMN | SH_LAYER_SPLIT_CHANNELS | SH_LAYER_ACTIVATION), "conv %#x", caps_of(text, 0));
    CHECK(caps_of(text, 1) == SH_LAYER_PER_CHANNEL, "maxpool %#x", caps_of(text, 1));
    CHECK(caps_of(text, 2) == SH_LAYER_PER_CHANNEL, "avgpool %#x", caps_of(text, 2));
    CHECK(caps_of(text, 3) == 0, "dropout %#x", caps_of(text, 3));
    CHECK(caps_of(text, 4) == dense, "connected %#x", caps_of(text, 4));
    CHECK(caps_of(text, 5) == SH_LAYER_SOFTMAX, "softmax %#x", caps_of(text, 5));
    CHECK(caps_of(text, 6) == SH_LAYER_LOSS, "cost %#x", caps_of(text, 6));
    CHECK(caps_of(NET "[convolutional]\nfilters=8\nsize=3\ngroups=2\n[softmax]\n", 0) == SH_LAYER_ACTIVATION, "grouped conv");
    CHECK(caps_of(NET "[rnn]\noutput=4\n[softmax]\n", 0) == SH_LAYER_ACTIVATION, "rnn");
    CHECK(caps_of(NET "[gru]\noutput=4\nform=darknet\n[softmax]\n", 0) == SH_LAYER_ACTIVATION, "darknet gru");
    CHECK(caps_of(NET "[gru]\noutput=4\n[softmax]\n", 0) == 0, "pytorch gru");
    /* a share is not packed by the net; without batch norm it steps its own update */
    sh_cfg *cfg = NULL;
    sh_net *n = NULL;
    unsigned char roles[3] = {SH_TP_COLUMN, SH_TP_ROW, 0};
    CHECK_OK(sh_cfg_parse(NET "[connected]\noutput=8\n[connected]\noutput=6\n[softmax]\n", "t.cfg", &cfg));
    CHECK_OK(sh_net_create_tensor(cfg, 2, 1, 0, 2, roles, &n));
    if (n) {
        unsigned share = (dense & ~(unsigned)SH_LAYER_PACKED_WEIGHTS) | SH_LAYER_FUSES_UPDATE;
        CHECK(sh_net_layer(n, 0)->caps == share, "column share %#x", sh_net_layer(n, 0)->caps);
        CHECK(sh_net_layer(n, 1)->caps == share, "row share %#x", sh_net_layer(n, 1)->caps);
    }
    sh_net_destroy(n);
    sh_cfg_destroy(cfg);
}

int main(void)
{
    check_begin("test_net_tensor", 60);
    RUN(pairs_follow_the_layers_capabilities);
    RUN(hybrid_cuts_before_the_first_gather_layer);
    RUN(layers_say_what_they_can_do);
    return check_end();
}
