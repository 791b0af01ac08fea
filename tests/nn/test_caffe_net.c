/* test_caffe_net.c — proves src/nn/caffe/caffe_net.c and caffe_layers.c: Caffe nets written
 * by tests/nn/caffe_torch.py (LeNet, CaffeNet's layers at 1/8 width, and a net of every other
 * mapped layer: BatchNorm+Scale with and without a conv bias, Eltwise, Concat, Sigmoid, TanH,
 * leaky ReLU, LRN, padded and ceil max pooling, global AVE, group convolution) with weights
 * written by python3-protobuf, run forward by shoal and compared with PyTorch's same net
 * within 1e-4; the TRAIN phase's layers; and each refusal: one error naming path:line, the
 * layer and the field. Without torch the comparisons say so in one line. */
#include "caffe_check.h"
#include "nn/layer.h"

static void forward_matches_pytorch(const char *name)
{
    char args[256], out[4096], path[256];
    snprintf(args, sizeof args, "net %s %s", name, cc_dir);
    if (!cc_python(args, out, sizeof out)) return;
    snprintf(path, sizeof path, "%s/%s.prototxt", cc_dir, name);
    sh_net *net = cc_net(path, 0);
    if (!net) return;
    snprintf(path, sizeof path, "%s/%s.caffemodel", cc_dir, name);
    CHECK_OK(sh_caffe_weights_load(net, path));
    size_t nx = 0, nref = 0;
    snprintf(path, sizeof path, "%s/input.bin", cc_dir);
    float *x = cc_floats(path, &nx);
    snprintf(path, sizeof path, "%s/expected.bin", cc_dir);
    float *ref = cc_floats(path, &nref);
    int nimg = sh_net_batch(net), k = sh_net_nclasses(net);
    CHECK(x && nx == (size_t)nimg * (size_t)sh_net_input_count(net), "%s: input of %zu values", name, nx);
    CHECK(ref && nref == 2 * (size_t)nimg * (size_t)k, "%s: reference of %zu values for %d x %d", name, nref, nimg, k);
    if (x && ref && nx == (size_t)nimg * (size_t)sh_net_input_count(net) && nref == 2 * (size_t)nimg * (size_t)k) {
        CHECK_OK(sh_net_forward(net, x, nimg, 0));
        const float *logits = sh_net_layer(net, sh_net_nlayers(net) - 2)->out, *prob = sh_net_output(net);
        double worst_l = 0, worst_p = 0;
        for (size_t i = 0; i < (size_t)nimg * (size_t)k; i++) {
            worst_l = fmax(worst_l, fabs(logits[i] - ref[i]) / fmax(1.0, fabs(ref[i])));
            worst_p = fmax(worst_p, fabs(prob[i] - ref[(size_t)nimg * k + i]));
        }
        CHECK(worst_l < 1e-4, "%s: logits differ from PyTorch's by %g (relative)", name, worst_l);
        CHECK(worst_p < 1e-4, "%s: probabilities differ from PyTorch's by %g", name, worst_p);
    }
    free(x);
    free(ref);
    sh_net_destroy(net);
}

static void lenet_caffenet_and_zoo_match_pytorch(void)
{
    if (!cc_have_reference()) {
        printf("test_caffe_net: no python3 torch/protobuf or protoc; comparison with PyTorch skipped\n");
        return;
    }
    forward_matches_pytorch("lenet");
    forward_matches_pytorch("caffenet_small");
    forward_matches_pytorch("zoo");
}

static const char *const head =
    "name: \"t\"\n"
    "layer { name: \"data\" type: \"Input\" top: \"data\" input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }\n";

/* Convert head + body; expect success or an error containing every string of want. */
static void expect(const char *body, const char *const *want, int nwant)
{
    char text[4096];
    snprintf(text, sizeof text, "%s%s", head, body);
    const char *path = cc_write("t.prototxt", text);
    char saved[256];
    snprintf(saved, sizeof saved, "%s", path);
    sh_cfg *cfg = NULL;
    shoal_result rc = sh_cfg_load(saved, &cfg);
    if (!nwant) {
        CHECK(rc == SHOAL_OK, "%s\nrefused: %s", body, shoal_last_error());
    } else {
        CHECK(rc == SHOAL_ERR_FORMAT, "%s\naccepted, want an error", body);
        for (int i = 0; rc != SHOAL_OK && i < nwant; i++)
            CHECK(strstr(shoal_last_error(), want[i]), "error lacks \"%s\": %s", want[i], shoal_last_error());
        CHECK(rc == SHOAL_OK || !strchr(shoal_last_error_message(), '\n'), "error has more than one line: %s",
              shoal_last_error());
    }
    sh_cfg_destroy(cfg);
}

#define EXPECT_OK(body) expect(body, NULL, 0)
#define EXPECT_ERR(body, ...)                                                          \
    do {                                                                               \
        const char *w_[] = {__VA_ARGS__};                                              \
        expect(body, w_, (int)(sizeof w_ / sizeof w_[0]));                             \
    } while (0)

#define CONV(name, bottom) "layer { name: \"" name "\" type: \"Convolution\" bottom: \"" bottom "\" top: \"" name \
    "\" convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }\n"

static void unmapped_layers_and_fields_are_refused_by_name(void)
{
    EXPECT_ERR(CONV("c", "data") "layer { name: \"e\" type: \"ELU\" bottom: \"c\" top: \"c\" }\n",
               "t.prototxt:4:", "layer 'e' (ELU)", "no shoal layer");
    EXPECT_ERR("layer { name: \"c\" type: \"Convolution\" bottom: \"data\" top: \"c\"\n"
               "  convolution_param { num_output: 4 kernel_size: 3\n dilation: 2 } }\n",
               "t.prototxt:5:", "layer 'c' (Convolution)", "dilation 2");
    EXPECT_ERR("layer { name: \"c\" type: \"Convolution\" bottom: \"data\" top: \"c\"\n"
               "  convolution_param { num_output: 4 kernel_size: 3 weird: 1 } }\n",
               "layer 'c' (Convolution)", "convolution_param.weird");
    EXPECT_ERR(CONV("c", "data") "layer { name: \"n\" type: \"LRN\" bottom: \"c\" top: \"n\" "
               "lrn_param { norm_region: WITHIN_CHANNEL } }\n", "layer 'n' (LRN)", "WITHIN_CHANNEL");
    EXPECT_ERR(CONV("c", "data") "layer { name: \"b\" type: \"BatchNorm\" bottom: \"c\" top: \"c\" }\n",
               "layer 'c' (Convolution)", "no Scale layer");
    EXPECT_ERR(CONV("c", "data") "layer { name: \"p\" type: \"Pooling\" bottom: \"c\" top: \"p\" "
               "pooling_param { pool: MAX kernel_size: 2 stride: 2 } }\n"
               "layer { name: \"r\" type: \"ReLU\" bottom: \"p\" top: \"p\" }\n",
               "layer 'r' (ReLU)", "follows layer 'p' (Pooling)");
    EXPECT_ERR(CONV("a", "data") CONV("b", "a")
               "layer { name: \"e\" type: \"Eltwise\" bottom: \"a\" bottom: \"b\" top: \"e\" "
               "eltwise_param { operation: PROD } }\n", "layer 'e' (Eltwise)", "PROD");
    EXPECT_ERR(CONV("c", "data") "layer { name: \"p\" type: \"Pooling\" bottom: \"c\" top: \"p\" "
               "pooling_param { pool: AVE kernel_size: 3 stride: 2 } }\n", "layer 'p' (Pooling)", "AVE");
    EXPECT_ERR(CONV("c", "data") "layer { name: \"s\" type: \"Scale\" bottom: \"c\" top: \"c\" "
               "scale_param { bias_term: true } }\n", "layer 's' (Scale)", "BatchNorm");
    EXPECT_ERR("layer { name: \"c\" type: \"Convolution\" bottom: \"nothing\" top: \"c\" "
               "convolution_param { num_output: 4 kernel_size: 3 } }\n", "bottom \"nothing\"");
    EXPECT_ERR("layer { name: \"c\" type: \"Convolution\" bottom: \"data\" top: \"c\" "
               "convolution_param { num_output: 4 kernel_h: 3 kernel_w: 1 } }\n", "kernel_h 3 and kernel_w 1");
    EXPECT_ERR("layer { name: \"c\" type: \"Convolution\" bottom: \"data\" top: \"c\" "
               "convolution_param { num_output: 4 kernel_size: 3 bias_term: false } }\n", "bias_term: false");
    EXPECT_ERR(CONV("c", "data") "layer { name: \"l\" type: \"SoftmaxWithLoss\" bottom: \"c\" bottom: \"data\" "
               "top: \"l\" }\n", "must be the labels");
}

static void train_phase_and_folding(void)
{
    /* a TEST-only layer is left out; in-place ReLU folds into the convolution */
    EXPECT_OK(CONV("c", "data") "layer { name: \"r\" type: \"ReLU\" bottom: \"c\" top: \"c\" }\n"
              "layer { name: \"x\" type: \"Bogus\" bottom: \"c\" top: \"x\" include { phase: TEST } }\n"
              "layer { name: \"gap\" type: \"Pooling\" bottom: \"c\" top: \"g\" pooling_param { pool: AVE "
              "global_pooling: true } }\n"
              "layer { name: \"fc\" type: \"InnerProduct\" bottom: \"g\" top: \"fc\" inner_product_param "
              "{ num_output: 3 } }\n"
              "layer { name: \"p\" type: \"Softmax\" bottom: \"fc\" top: \"p\" }\n");
    EXPECT_ERR(CONV("c", "data") "layer { name: \"x\" type: \"Bogus\" bottom: \"c\" top: \"x\" "
               "exclude { phase: TEST } }\n", "layer 'x' (Bogus)");
    /* a reader of the value before a ReLU under a new name */
    EXPECT_ERR(CONV("c", "data") "layer { name: \"r\" type: \"ReLU\" bottom: \"c\" top: \"r\" }\n"
               CONV("d", "c"), "layer 'd' (Convolution)", "before layer 'r' (ReLU)");
    /* the converted sections: relu on the conv, a route where a layer reads an older blob */
    char text[4096];
    snprintf(text, sizeof text, "%s%s", head,
             CONV("a", "data") "layer { name: \"r\" type: \"ReLU\" bottom: \"a\" top: \"a\" }\n"
             CONV("b", "a") CONV("c", "a")
             "layer { name: \"j\" type: \"Concat\" bottom: \"b\" bottom: \"c\" top: \"j\" }\n");
    sh_net *net = cc_net(cc_write("r.prototxt", text), 0);
    if (!net) return;
    CHECK(sh_net_nlayers(net) == 5, "%d layers, want conv, conv, route, conv, route", sh_net_nlayers(net));
    const char *want[] = {"conv 0", "conv 1", "route 2", "conv 3", "route 4"};
    for (int i = 0; i < 5 && i < sh_net_nlayers(net); i++)
        CHECK(!strcmp(sh_net_layer_name(net, i), want[i]), "layer %d is %s, want %s", i, sh_net_layer_name(net, i),
              want[i]);
    CHECK(sh_net_layer(net, 0)->act == SH_ACT_RELU, "ReLU folded into conv a");
    int c, h, w;
    sh_net_layer_shape(net, 4, &c, &h, &w);
    CHECK(c == 8 && h == 8 && w == 8, "concat %dx%dx%d", c, h, w);
    sh_net_destroy(net);
}

static void pooling_takes_caffes_ceil_size(void)
{
    char text[1024];
    /* 8 -> (8 - 3) / 2 = 2.5: Caffe rounds up to 4 outputs, Darknet's formula gives 3 */
    snprintf(text, sizeof text, "%s%s", head,
             "layer { name: \"p\" type: \"Pooling\" bottom: \"data\" top: \"p\" pooling_param { pool: MAX "
             "kernel_size: 3 stride: 2 } }\n");
    sh_net *net = cc_net(cc_write("p.prototxt", text), 0);
    if (!net) return;
    int c, h, w;
    sh_net_layer_shape(net, 0, &c, &h, &w);
    CHECK(c == 3 && h == 4 && w == 4, "pooled %dx%dx%d, want 3x4x4", c, h, w);
    sh_net_destroy(net);
}

static void data_layer_takes_the_dataset_shape(void)
{
    const char *data = "layer { name: \"d\" type: \"Data\" top: \"data\" top: \"label\" transform_param { scale: "
                       "0.00390625 } data_param { source: \"x_lmdb\" batch_size: 5 backend: LMDB } }\n"
                       CONV("c", "data");
    const char *path = cc_write("d.prototxt", data);
    char saved[256];
    snprintf(saved, sizeof saved, "%s", path);
    sh_cfg *cfg = NULL;
    sh_caffe_use_data_shape(0, 0, 0);
    CHECK_RC(sh_cfg_load(saved, &cfg), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "Input layer"), "says to use an Input layer: %s", shoal_last_error());
    sh_caffe_use_data_shape(1, 28, 28);
    sh_net *net = cc_net(saved, 0);
    if (net) {
        CHECK(sh_net_batch(net) == 5 && sh_net_input_count(net) == 784, "batch %d input %d", sh_net_batch(net),
              sh_net_input_count(net));
        sh_net_destroy(net);
    }
    sh_caffe_use_data_shape(0, 0, 0);
}

int main(void)
{
    check_begin("test_caffe_net", 240);
    cc_mkdir();
    RUN(lenet_caffenet_and_zoo_match_pytorch);
    RUN(unmapped_layers_and_fields_are_refused_by_name);
    RUN(train_phase_and_folding);
    RUN(pooling_takes_caffes_ceil_size);
    RUN(data_layer_takes_the_dataset_shape);
    cc_rmdir();
    return check_end();
}
