/* mp/pipeline_pass.c — one pass of a pipeline stage: the 1F1B schedule (PipeDream-Flush,
 * Narayanan et al. 2021; Megatron-LM's "one forward one backward") and its traffic.
 * Not here: the layout, the update and the replicas' average (mp/pipeline.c), where the net
 * is cut (mp/pipeline_plan.c), cutting a net into parts (src/nn/net_part.c).
 * Proved by tests/train/test_pipeline.c, test_pipeline_links.c and tests/cli/test_train_pipeline.c. */

/* Vocabulary: S stages, M micro-batches of mb = batch / M images.
 * Stage s first runs min(S-s-1, M) forwards (warm-up), then alternates one forward and one
 * backward, then runs the backwards left (cool-down): at most S-s micro-batches are in
 * flight, each in its own instance of the stage's part of the net (its activations kept
 * for backward); the instances share the parameter and gradient blocks. Weight gradients are
 * deferred (zero-bubble pipelines' B/W split): a micro-batch's backward computes only its
 * input's gradient (what the stage before waits for) and the layers' that cannot defer
 * theirs; each [connected] layer's factors X and dY / M are copied into whole-batch buffers,
 * and after the last backward (the last stage: while the first still runs its own) each such
 * layer's dW = dY^T X is one product over the whole batch, as one process computes it. A
 * stage before the last waits for its last micro-batch's dY: meanwhile it computes the
 * products over the micro-batches before, and after that backward adds the last one's. The
 * other layers' gradients are summed over the micro-batches in `acc`, then divided by M: the
 * full batch's mean gradient.
 * Links: when a [route] or [shortcut] in stage k reads a layer before the one just before
 * stage k's start (sh_net_cut_links), that output goes from stage to stage (each passing it
 * on from its instance's held copy) after the activations, one message per link in layer
 * order, and its gradient comes back the same way, each stage adding its own layers' part.
 * Cost per step and stage: M sends of mb x (stage output + links at its end) floats forward
 * and of mb x (stage input + links at its start) floats backward; idle (bubble) share
 * (S-1) / (M+S-1) with balanced stages. */
#include <string.h>

#include "base/err.h"
#include "base/trace.h"
#include "base/util.h"
#include "train/mp/pipeline_internal.h"

shoal_result sh_pipe_wait_req(shoal_request **req)
{
    if (!*req) return SHOAL_OK;
    shoal_result rc = shoal_wait(*req);
    *req = NULL;
    return rc;
}

static int mb_images(const pipe_state *p, int m, int n)
{
    int left = n - m * p->mb;
    return left < p->mb ? left : p->mb;
}

/* The timeline's pipeline track: the wait for the neighbour stage (the bubble, when the
 * stage had nothing else to do) and then the micro-batch's work, its send started. */
static void trace_micro(const pipe_state *p, int m, const char *what, uint64_t t0, uint64_t t1,
                        uint64_t t3)
{
    if (!sh_trace_on()) return;
    if (t1 > t0) sh_trace_span(SH_TRACK_PIPE, "idle", t0, t1, "stage", p->stage, "micro_batch", m);
    sh_trace_span(SH_TRACK_PIPE, what, t1, t3, "stage", p->stage, "micro_batch", m);
}

shoal_result sh_pipe_wait_links(shoal_request **req, int count)
{
    for (int t = 0; t < count; t++) SH_TRY(sh_pipe_wait_req(&req[t]));
    return SHOAL_OK;
}

/* After the activations (grad 0: from the stage before, the links of its start) or their
 * gradient (grad 1: from the stage after, those of its end), each link's in turn, straight
 * into instance j's buffers: a held link's output, or the gradient of a layer it sends (its
 * own, a held link's, or its input's), which its layers' backward then adds to. */
static shoal_result links_receive(pipe_state *p, int j, int cnt, int grad)
{
    sh_net *net = p->inst[j];
    int count = grad ? p->nlink_out : p->nlink_in;
    const int *links = grad ? p->link_out : p->link_in;
    for (int t = 0; t < count; t++) {
        int s = links[t];
        float *buf = grad ? sh_net_link_delta(net, s) : sh_net_link_output(net, s);
        SH_TRY(shoal_broadcast(grad ? p->grad[1] : p->act[0], buf, buf,
                               (size_t)cnt * sh_net_layer_outputs(net, s), SHOAL_FLOAT32, grad ? 1 : 0));
    }
    return SHOAL_OK;
}

/* After the activations (grad 0: to the stage after, the links of its end: its own layers'
 * outputs, its input's, or held links passed on) or the input's gradient (grad 1: to the
 * stage before, the held links' gradients), started; waited before instance j runs again. */
static shoal_result links_send(pipe_state *p, int j, int cnt, int grad)
{
    sh_net *net = p->inst[j];
    int count = grad ? p->nlink_in : p->nlink_out, lo = p->cuts[p->stage];
    const int *links = grad ? p->link_in : p->link_out;
    shoal_request **req = grad ? p->link_grad_req + (size_t)j * p->nlink_in
                               : p->link_act_req + (size_t)j * p->nlink_out;
    for (int t = 0; t < count; t++) {
        int s = links[t];
        float *buf = grad ? sh_net_link_delta(net, s) : s == lo - 1 ? p->in_buf[j] : sh_net_link_output(net, s);
        SH_TRY(shoal_broadcast_start(grad ? p->grad[0] : p->act[1], buf, buf,
                                     (size_t)cnt * sh_net_layer_outputs(net, s), SHOAL_FLOAT32, grad ? 1 : 0,
                                     &req[t]));
    }
    return SHOAL_OK;
}

static shoal_result forward_one(pipe_state *p, int m, const float *x, const int32_t *y, int n,
                                int training, double *loss_sum, int *correct)
{
    int j = m % p->K, cnt = mb_images(p, m, n);
    sh_net *net = p->inst[j];
    uint64_t t0 = sh_now_ns();
    if (p->pack_forward && p->updates) { /* after a start or a resume: before the wait */
        sh_net_pack_weights(p->inst[0], SH_PACK_FORWARD); /* for the activations */
        for (int i = 0; i < p->K; i++) sh_net_use_packed(p->inst[i], p->packs);
        p->pack_forward = 0; /* every later pass runs packed (the update packs), so this one does too */
        uint64_t tp = sh_now_ns();
        p->acc_ns[0] += (double)(tp - t0);
        t0 = tp;
    }
    SH_TRY(sh_pipe_wait_req(&p->act_req[j])); /* its output is about to be overwritten */
    SH_TRY(sh_pipe_wait_links(p->link_act_req + (size_t)j * p->nlink_out, p->nlink_out));
    const float *in = x + (size_t)m * p->mb * p->in_count;
    if (p->stage > 0) {
        SH_TRY(shoal_broadcast(p->act[0], p->in_buf[j], p->in_buf[j], (size_t)cnt * p->in_count,
                               SHOAL_FLOAT32, 0));
        SH_TRY(links_receive(p, j, cnt, 0));
        in = p->in_buf[j];
    }
    uint64_t t1 = sh_now_ns();
    sh_net_rng_set(net, p->rng);
    if (p->pack_forward) sh_net_use_packed(net, p->packs & ~SH_PACK_FORWARD);
    SH_TRY(sh_net_forward(net, in, cnt, training));
    sh_net_rng_get(net, p->rng);
    sh_net_rng_set(p->inst[0], p->rng); /* the trainer's copy: checkpoints save it */
    if (p->stage == p->S - 1) {
        *loss_sum += (double)sh_net_loss(net, y + (size_t)m * p->mb) * cnt;
        *correct += sh_net_correct(net, y + (size_t)m * p->mb);
    }
    uint64_t t2 = sh_now_ns();
    if (p->stage < p->S - 1) {
        SH_TRY(shoal_broadcast_start(p->act[1], sh_net_part_output(net), (void *)sh_net_part_output(net),
                                     (size_t)cnt * p->out_count, SHOAL_FLOAT32, 0, &p->act_req[j]));
        SH_TRY(links_send(p, j, cnt, 0));
    }
    uint64_t t3 = sh_now_ns(), t4 = t3;
    if (p->pack_forward) {
        sh_net_pack_weights(p->inst[0], SH_PACK_FORWARD); /* the instances share them */
        for (int i = 0; i < p->K; i++) sh_net_use_packed(p->inst[i], p->packs);
        p->pack_forward = 0;
        t4 = sh_now_ns();
    }
    p->acc_ns[2] += (double)(t1 - t0);
    p->acc_ns[0] += (double)(t2 - t1 + t4 - t3);
    p->acc_ns[3] += (double)(t3 - t2);
    trace_micro(p, m, "forward", t0, t1, t4);
    return SHOAL_OK;
}

/* Micro-batch m's factors of the deferred layers, at row m * mb of the whole-batch buffers;
 * dY scaled by inv_nmb, so that the product over all rows is the mean over micro-batches. */
static void keep_factors(pipe_state *p, sh_net *net, int m, int cnt, float inv_nmb)
{
    for (int d = 0; d < p->ndefer; d++) {
        const float *x, *dy;
        int in, out;
        sh_net_layer_factors(net, p->defer_layer[d], &x, &dy, &in, &out);
        size_t row = (size_t)m * p->mb;
        if (p->defer_x[d]) memcpy(p->defer_x[d] + row * in, x, (size_t)cnt * in * sizeof(float));
        float *to = p->defer_dy[d] + row * out;
        for (size_t i = 0; i < (size_t)cnt * out; i++) to[i] = dy[i] * inv_nmb;
    }
}

/* The deferred weight gradients of images [i0, i1) of the pass, each one product over all of
 * them; i0 > 0 adds them to those of the images before. */
static void weights_of(pipe_state *p, const float *x, int i0, int i1)
{
    uint64_t t0 = sh_now_ns();
    for (int d = p->ndefer - 1; d >= 0; d--) {
        int l = p->defer_layer[d], in, out;
        const float *fx, *fdy;
        sh_net_layer_factors(p->inst[0], l, &fx, &fdy, &in, &out);
        const float *xs = (p->defer_x[d] ? p->defer_x[d] : x) + (size_t)i0 * in;
        sh_net_layer_weight_grads(p->inst[0], l, xs, p->defer_dy[d] + (size_t)i0 * out, i1 - i0, i0 > 0);
    }
    uint64_t t1 = sh_now_ns();
    p->acc_ns[1] += (double)(t1 - t0);
    if (sh_trace_on()) sh_trace_span(SH_TRACK_PIPE, "weights", t0, t1, "stage", p->stage, "micro_batch", -1);
}

static shoal_result backward_one(pipe_state *p, int m, int n)
{
    int j = m % p->K, cnt = mb_images(p, m, n);
    sh_net *net = p->inst[j];
    uint64_t t0 = sh_now_ns();
    if (p->pack_backward) { /* while the stage after computes the gradient we wait for */
        sh_net_pack_weights(p->inst[0], SH_PACK_BACKWARD);
        p->pack_backward = 0;
        uint64_t tp = sh_now_ns();
        p->acc_ns[1] += (double)(tp - t0);
        t0 = tp;
    }
    SH_TRY(sh_pipe_wait_req(&p->grad_req[j])); /* its input's gradient is about to be overwritten */
    SH_TRY(sh_pipe_wait_links(p->link_grad_req + (size_t)j * p->nlink_in, p->nlink_in));
    if (p->stage < p->S - 1) {
        SH_TRY(shoal_broadcast(p->grad[1], sh_net_part_output_delta(net), sh_net_part_output_delta(net),
                               (size_t)cnt * p->out_count, SHOAL_FLOAT32, 1));
        SH_TRY(links_receive(p, j, cnt, 1));
    }
    uint64_t t1 = sh_now_ns();
    SH_TRY(sh_net_backward(net, NULL, NULL));
    keep_factors(p, net, m, cnt, 1.0f / (float)((n + p->mb - 1) / p->mb));
    const float *g = sh_net_grads(net);
    for (int r = 0; r < p->nsums; r++) {
        float *acc = p->acc + p->sum_off[r];
        const float *gr = g + p->sum_off[r];
        if (m == 0) memcpy(acc, gr, p->sum_count[r] * sizeof(float));
        else
            for (size_t i = 0; i < p->sum_count[r]; i++) acc[i] += gr[i];
    }
    uint64_t t2 = sh_now_ns();
    if (p->stage > 0) {
        SH_TRY(shoal_broadcast_start(p->grad[0], sh_net_input_delta(net), (void *)sh_net_input_delta(net),
                                     (size_t)cnt * p->in_count, SHOAL_FLOAT32, 1, &p->grad_req[j]));
        SH_TRY(links_send(p, j, cnt, 1));
    }
    uint64_t t3 = sh_now_ns();
    p->acc_ns[2] += (double)(t1 - t0);
    p->acc_ns[1] += (double)(t2 - t1);
    p->acc_ns[3] += (double)(t3 - t2);
    trace_micro(p, m, "backward", t0, t1, t3);
    return SHOAL_OK;
}

/* The last stage knows the loss and the hits: they go back along the chain of stages. */
static shoal_result share_result(pipe_state *p, double v[2])
{
    if (p->grad[1]) SH_TRY(shoal_broadcast(p->grad[1], v, v, 2, SHOAL_FLOAT64, 1));
    if (p->grad[0]) SH_TRY(shoal_broadcast(p->grad[0], v, v, 2, SHOAL_FLOAT64, 1));
    return SHOAL_OK;
}

shoal_result sh_pipe_pass(sh_strategy *s, const float *x, const int32_t *y, int n, int training,
                          float *loss, int *correct)
{
    pipe_state *p = s->impl;
    if (n <= 0) { /* evaluation left this replica nothing: every stage of it sees the same n */
        *loss = 0;
        *correct = 0;
        return SHOAL_OK;
    }
    uint64_t t0 = sh_now_ns();
    p->acc_ns = training ? p->ns : p->eval_ns;
    if ((p->packs & SH_PACK_FORWARD) && (p->stale & SH_PACK_FORWARD) && !training) {
        sh_net_pack_weights(p->inst[0], SH_PACK_FORWARD); /* shared */
        p->stale &= ~SH_PACK_FORWARD;
    }
    /* Training with stale copies: a stage that updates (after a start or a resume) packs the
     * forward ones before its first forward's wait; else the first micro-batch's forward runs without (OpenBLAS), and
     * the copies are made while the next stage computes on it (forward_one); the backward
     * ones before the first backward's wait (backward_one). */
    p->pack_forward = (p->packs & SH_PACK_FORWARD) && training && (p->stale & SH_PACK_FORWARD);
    p->pack_backward = (p->packs & SH_PACK_BACKWARD) && training && (p->stale & SH_PACK_BACKWARD);
    if (training) p->stale = p->updates ? 0 : SH_PACK_FORWARD | SH_PACK_BACKWARD; /* the update after it */
    int nmb = (n + p->mb - 1) / p->mb, hits = 0;
    double loss_sum = 0;
    if (!training) {
        for (int m = 0; m < nmb; m++) SH_TRY(forward_one(p, m, x, y, n, 0, &loss_sum, &hits));
    } else {
        int warm = p->S - p->stage - 1 < nmb ? p->S - p->stage - 1 : nmb, f = 0, b = 0;
        for (int j = 0; j < p->K; j++) sh_net_defer_weights(p->inst[j], p->defer);
        for (; f < warm; f++) SH_TRY(forward_one(p, f, x, y, n, 1, &loss_sum, &hits));
        while (f < nmb) {
            SH_TRY(forward_one(p, f++, x, y, n, 1, &loss_sum, &hits));
            SH_TRY(backward_one(p, b++, n));
        }
        while (b < nmb - 1) SH_TRY(backward_one(p, b++, n));
        /* a stage before the last waits for the last dY: the products of those before first */
        int early = p->stage < p->S - 1 ? b * p->mb : 0;
        if (early) weights_of(p, x, 0, early);
        if (b < nmb) SH_TRY(backward_one(p, b++, n)); /* the last stage ran them all in 1F1B */
        for (int j = 0; j < p->K; j++) sh_net_defer_weights(p->inst[j], 0);
        weights_of(p, x, early, n);
        /* the mean over micro-batches of their mean gradients: the batch's mean gradient */
        float *g = sh_net_grads(p->inst[0]), inv = 1.0f / (float)nmb;
        for (int r = 0; r < p->nsums; r++)
            for (size_t i = p->sum_off[r]; i < p->sum_off[r] + p->sum_count[r]; i++) g[i] = p->acc[i] * inv;
    }
    uint64_t t1 = sh_now_ns();
    for (int j = 0; j < p->K; j++) {
        SH_TRY(sh_pipe_wait_req(&p->act_req[j]));
        SH_TRY(sh_pipe_wait_req(&p->grad_req[j]));
    }
    SH_TRY(sh_pipe_wait_links(p->link_act_req, p->K * p->nlink_out));
    SH_TRY(sh_pipe_wait_links(p->link_grad_req, p->K * p->nlink_in));
    double v[2] = {loss_sum, hits};
    if (p->S > 1) SH_TRY(share_result(p, v));
    uint64_t t2 = sh_now_ns();
    if (sh_trace_on() && t2 > t1) /* the last sends drain and the loss comes back */
        sh_trace_span(SH_TRACK_PIPE, "idle", t1, t2, "stage", p->stage, "micro_batch", -1);
    *loss = (float)(v[0] / n);
    *correct = (int)v[1];
    if (training) {
        p->ns[2] += (double)(t2 - t1); /* idle: the neighbour still computes (the loss comes after) */
        p->ns[4] += (double)(t2 - t0);
        p->passes++;
    }
    return SHOAL_OK;
}
