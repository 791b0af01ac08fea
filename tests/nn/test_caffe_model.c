/* test_caffe_model.c — proves src/nn/caffe/caffe_model.c: a .caffemodel written by shoal
 * reads back into the same parameters and statistics, bit for bit, and writes the same bytes
 * again (LeNet, and a net with BatchNorm+Scale after a biased convolution); Google's protobuf
 * (python3-protobuf, caffe.proto compiled by protoc) reads shoal's file with the layers,
 * shapes and sums shoal wrote; Caffe's first format (V1 layers, 4-D num/channels/height/width
 * shapes) loads as the current one does; a truncated file, a wrong shape and a .cfg model are
 * refused in one line; a layer missing from the file keeps its weights. */
#include "caffe_check.h"
#include "nn/layer.h"

static const char *const bn_net =
    "name: \"bn\"\n"
    "layer { name: \"data\" type: \"Input\" top: \"data\" input_param { shape { dim: 2 dim: 2 dim: 6 dim: 6 } } }\n"
    "layer { name: \"c1\" type: \"Convolution\" bottom: \"data\" top: \"c1\" convolution_param { num_output: 4 "
    "kernel_size: 3 } }\n"
    "layer { name: \"c1_bn\" type: \"BatchNorm\" bottom: \"c1\" top: \"c1\" }\n"
    "layer { name: \"c1_sc\" type: \"Scale\" bottom: \"c1\" top: \"c1\" scale_param { bias_term: true } }\n"
    "layer { name: \"fc\" type: \"InnerProduct\" bottom: \"c1\" top: \"fc\" inner_product_param { num_output: 5 } }\n"
    "layer { name: \"p\" type: \"Softmax\" bottom: \"fc\" top: \"p\" }\n";

/* Random parameters and statistics (variances positive). */
static void scramble(sh_net *net, uint64_t seed)
{
    sh_rng r;
    sh_rng_seed(&r, seed);
    float *p = sh_net_params(net);
    for (size_t i = 0; i < sh_net_nparams(net); i++) p[i] = sh_rng_float(&r) - 0.5f;
    size_t ns = 0;
    float *s = sh_net_stats(net, &ns);
    for (size_t i = 0; i < ns; i++) s[i] = 0.1f + sh_rng_float(&r);
}

static int same_state(sh_net *a, sh_net *b)
{
    size_t na = 0, nb = 0;
    float *sa = sh_net_stats(a, &na), *sb = sh_net_stats(b, &nb);
    return sh_net_nparams(a) == sh_net_nparams(b) && na == nb &&
           !memcmp(sh_net_params(a), sh_net_params(b), sh_net_nparams(a) * sizeof(float)) &&
           (!na || !memcmp(sa, sb, na * sizeof(float)));
}

static long long file_nbytes(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long long n = ftell(f);
    fclose(f);
    return n;
}

static int same_bytes(const char *a, const char *b)
{
    char cmd[1100], out[64];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s && echo same", a, b);
    return sh_test_run(cmd, out, sizeof out) == 0 && !strncmp(out, "same", 4);
}

static void round_trip(const char *name, const char *prototxt_text)
{
    char proto[256], first[256], second[256];
    snprintf(proto, sizeof proto, "%s", cc_write(name, prototxt_text));
    snprintf(first, sizeof first, "%s/%s.1.caffemodel", cc_dir, name);
    snprintf(second, sizeof second, "%s/%s.2.caffemodel", cc_dir, name);
    sh_net *a = cc_net(proto, 0), *b = cc_net(proto, 0);
    if (!a || !b) goto done;
    scramble(a, 3);
    /* a biased convolution before batch norm has no bias of its own in shoal */
    CHECK_OK(sh_caffe_weights_save(a, first));
    CHECK_OK(sh_caffe_weights_load(b, first));
    CHECK(same_state(a, b), "%s: parameters or statistics differ after write and read", name);
    CHECK_OK(sh_caffe_weights_save(b, second));
    CHECK(same_bytes(first, second), "%s: the second write differs from the first", name);
done:
    sh_net_destroy(a);
    sh_net_destroy(b);
}

static void caffemodel_round_trips(void)
{
    char text[4096];
    FILE *f = fopen("examples/caffe/lenet.prototxt", "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    CHECK(n > 0, "examples/caffe/lenet.prototxt readable");
    round_trip("lenet.prototxt", text);
    round_trip("bn.prototxt", bn_net);
}

/* Google's decoder reads what shoal wrote: names, types, shapes and sums per blob. */
static void protobuf_reads_shoals_file(void)
{
    if (!cc_have_reference()) {
        printf("test_caffe_model: no python3 protobuf or protoc; cross-check skipped\n");
        return;
    }
    char proto[256], model[256];
    snprintf(proto, sizeof proto, "%s", cc_write("bn.prototxt", bn_net));
    snprintf(model, sizeof model, "%s/bn.caffemodel", cc_dir);
    sh_net *net = cc_net(proto, 0);
    if (!net) return;
    scramble(net, 5);
    CHECK_OK(sh_caffe_weights_save(net, model));
    char args[300], out[4096];
    snprintf(args, sizeof args, "read %s", model);
    if (cc_python(args, out, sizeof out)) {
        CHECK(strstr(out, "net bn layers 4"), "net name and 4 layers with blobs: %s", out);
        CHECK(strstr(out, "c1 Convolution 0 4x2x3x3 ") && strstr(out, "c1 Convolution 1 4 0 0"),
              "conv weights (4, 2, 3, 3) and a zero bias (folded into the mean): %s", out);
        CHECK(strstr(out, "c1_bn BatchNorm 2 1 1 1"), "batch norm scale factor 1: %s", out);
        CHECK(strstr(out, "fc InnerProduct 0 5x64 "), "inner product (5, 64): %s", out);
        /* the sums of the InnerProduct's weights as shoal holds them */
        sh_layer *l = sh_net_layer(net, 1);
        double sum = 0;
        for (size_t i = 0; i < l->w_count; i++) sum += sh_net_params(net)[l->w_off + i];
        char *at = strstr(out, "fc InnerProduct 0 5x64 ");
        double got = at ? atof(at + strlen("fc InnerProduct 0 5x64 ")) : 1e9;
        CHECK(fabs(got - sum) < 1e-4, "fc weight sum %g, shoal's %g", got, sum);
    }
    sh_net_destroy(net);
}

/* Caffe's first files (V1 layers, 4-D shapes) load as the current format does. */
static void legacy_format_loads(void)
{
    if (!cc_have_reference()) return;
    char args[300], out[4096], legacy[256], current[256], proto[256];
    snprintf(legacy, sizeof legacy, "%s/legacy.caffemodel", cc_dir);
    snprintf(args, sizeof args, "legacy %s", legacy);
    if (!cc_python(args, out, sizeof out)) return;
    snprintf(args, sizeof args, "net lenet %s", cc_dir);
    if (!cc_python(args, out, sizeof out)) return;
    snprintf(current, sizeof current, "%s/lenet.caffemodel", cc_dir);
    snprintf(proto, sizeof proto, "%s/lenet.prototxt", cc_dir);
    sh_net *a = cc_net(proto, 0), *b = cc_net(proto, 0);
    if (a && b) {
        CHECK_OK(sh_caffe_weights_load(a, legacy));
        CHECK_OK(sh_caffe_weights_load(b, current));
        CHECK(same_state(a, b), "V1 file and current file give different weights");
    }
    sh_net_destroy(a);
    sh_net_destroy(b);
}

static void bad_files_are_refused(void)
{
    char proto[256], model[256], cut[256];
    snprintf(proto, sizeof proto, "%s", cc_write("bn.prototxt", bn_net));
    snprintf(model, sizeof model, "%s/good.caffemodel", cc_dir);
    snprintf(cut, sizeof cut, "%s/cut.caffemodel", cc_dir);
    sh_net *net = cc_net(proto, 0);
    if (!net) return;
    CHECK_OK(sh_caffe_weights_save(net, model));
    long long n = file_nbytes(model);
    char cmd[600], out[64];
    snprintf(cmd, sizeof cmd, "head -c %lld %s > %s", n / 2, model, cut);
    (void)sh_test_run(cmd, out, sizeof out);
    CHECK_RC(sh_caffe_weights_load(net, cut), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error_message(), "cut.caffemodel") &&
          strstr(shoal_last_error_message(), "not a Caffe .caffemodel"), "truncated: %s", shoal_last_error_message());
    /* a net whose fc has other outputs: the blob's shape is named */
    char other[4096];
    snprintf(other, sizeof other, "%s", bn_net);
    char *at = strstr(other, "num_output: 5");
    if (at) at[12] = '6';
    sh_net *wide = cc_net(cc_write("wide.prototxt", other), 0);
    if (wide) {
        CHECK_RC(sh_caffe_weights_load(wide, model), SHOAL_ERR_FORMAT);
        CHECK(strstr(shoal_last_error_message(), "layer 'fc' blob 1 (weights) is 5 x 64") &&
              strstr(shoal_last_error_message(), "needs 6 x 64"), "shape: %s", shoal_last_error_message());
    }
    sh_net_destroy(wide);
    /* a layer the file lacks keeps its weights: fine-tuning with a renamed last layer */
    char renamed[4096];
    snprintf(renamed, sizeof renamed, "%s", bn_net);
    at = strstr(renamed, "name: \"fc\"");
    if (at) memcpy(at, "name: \"fx\"", 10);
    sh_net *ft = cc_net(cc_write("ft.prototxt", renamed), 0);
    if (ft) {
        scramble(ft, 9);
        sh_layer *l = sh_net_layer(ft, 1);
        float before = sh_net_params(ft)[l->w_off];
        CHECK_OK(sh_caffe_weights_load(ft, model));
        CHECK(sh_net_params(ft)[l->w_off] == before, "the renamed layer kept its weights");
    }
    sh_net_destroy(ft);
    sh_net_destroy(net);
    /* a net read from a .cfg has no Caffe layers */
    sh_cfg *cfg = NULL;
    sh_net *dn = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nbatch=1\nchannels=1\nheight=4\nwidth=4\n[connected]\noutput=2\n[softmax]\n",
                          "small.cfg", &cfg));
    CHECK_OK(sh_net_create(cfg, 1, 1, &dn));
    CHECK_RC(sh_caffe_weights_load(dn, model), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), ".prototxt"), "cfg net: %s", shoal_last_error_message());
    sh_net_destroy(dn);
    sh_cfg_destroy(cfg);
}

int main(void)
{
    check_begin("test_caffe_model", 180);
    cc_mkdir();
    RUN(caffemodel_round_trips);
    RUN(protobuf_reads_shoals_file);
    RUN(legacy_format_loads);
    RUN(bad_files_are_refused);
    cc_rmdir();
    return check_end();
}
