/* plan/choose.c — the layouts the planner weighs for N = H x R ranks: data parallelism plain,
 * with fp16, 1-bit and top-1% gradients and with --sfb; pipelines of S stages (S dividing N,
 * up to 16) at S, 2S and 4S micro-batches; tensor parallelism over T ranks (T dividing N, up
 * to 16); pipelines of tensor-split stages; hybrid parallelism's three schemes; each
 * predicted (plan/cost.c), sorted by images/s, printed as a table or JSON with the choice.
 * Not here: the model (plan/cost.c), measuring (plan/measure.c), the job's --parallel auto
 * (plan/auto.c).
 * Proved by tests/train/test_plan.c and tests/cli/test_plan_cli.c. */
#include "train/plan/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/mp/hybrid.h"

#define MAX_WAYS 16 /* the most stages or tensor ranks weighed */

static const char *const codec_names[SH_PLAN_NCODECS] = {"fp16", "1bit", "topk:0.01"};

static void add(sh_plan_list *out, const sh_plan_model *m, const sh_plan_cluster *c, sh_plan_layout L)
{
    if (out->n >= SH_PLAN_MAX_LAYOUTS) return;
    int n = c->hosts * c->ranks_per_host;
    switch (L.kind) {
    case SH_PLAN_DP:
        snprintf(L.name, sizeof L.name, "data parallel%s%s", L.codec >= 0 ? ", " : L.sfb ? ", sufficient factors" : "",
                 L.codec >= 0 ? codec_names[L.codec] : "");
        snprintf(L.flags, sizeof L.flags, "%s%s%s", L.codec >= 0 ? "--compress " : "",
                 L.codec >= 0 ? codec_names[L.codec] : "", L.sfb ? "--sfb" : "");
        break;
    case SH_PLAN_PIPE: {
        int D = L.S * L.T > 0 && n % (L.S * L.T) == 0 ? n / (L.S * L.T) : 0;
        char reps[24] = "";
        if (D > 1) snprintf(reps, sizeof reps, " x %d replicas", D);
        if (L.S == 1) {
            snprintf(L.name, sizeof L.name, "tensor parallel %d%s", L.T, reps);
            snprintf(L.flags, sizeof L.flags, "--tensor-parallel %d", L.T);
        } else if (L.T == 1) {
            snprintf(L.name, sizeof L.name, "pipeline %d stages, %d micro-batches%s", L.S, L.M, reps);
            snprintf(L.flags, sizeof L.flags, "--pipeline %d --micro-batches %d", L.S, L.M);
        } else {
            snprintf(L.name, sizeof L.name, "pipeline %d x tensor %d, %d micro-batches%s", L.S, L.T, L.M, reps);
            snprintf(L.flags, sizeof L.flags, "--pipeline %d --micro-batches %d --tensor-parallel %d", L.S, L.M, L.T);
        }
        break;
    }
    case SH_PLAN_HYBRID:
        snprintf(L.name, sizeof L.name, "hybrid %s", sh_hybrid_scheme_name((sh_hybrid_scheme)L.scheme));
        snprintf(L.flags, sizeof L.flags, "--hybrid %s", sh_hybrid_scheme_name((sh_hybrid_scheme)L.scheme));
        break;
    }
    sh_plan_predict(m, c, &L);
    out->l[out->n++] = L;
}

static int by_speed(const void *a, const void *b)
{
    const sh_plan_layout *x = a, *y = b;
    if (x->ok != y->ok) return y->ok - x->ok;
    if (x->images_per_s != y->images_per_s) return x->images_per_s < y->images_per_s ? 1 : -1;
    return strcmp(x->flags, y->flags); /* the same figures: the simpler flags first */
}

static int has_sfb_layer(const sh_plan_model *m)
{
    for (int l = 0; l < m->nlayers; l++) {
        const sh_plan_layer *y = &m->layer[l];
        if (y->connected && (double)m->batch * (double)(y->inputs + y->outputs) < (double)y->inputs * y->outputs)
            return 1;
    }
    return 0;
}

void sh_plan_enumerate(const sh_plan_model *m, const sh_plan_cluster *c, sh_plan_list *out)
{
    memset(out, 0, sizeof *out);
    out->best = -1;
    int n = c->hosts * c->ranks_per_host;
    sh_plan_layout base;
    memset(&base, 0, sizeof base);
    base.codec = -1;
    base.S = base.M = base.T = 1;
    add(out, m, c, base);
    if (n < 2) goto sort;
    for (int k = 0; k < SH_PLAN_NCODECS; k++) {
        sh_plan_layout L = base;
        L.codec = k;
        add(out, m, c, L);
    }
    if (has_sfb_layer(m)) {
        sh_plan_layout L = base;
        L.sfb = 1;
        add(out, m, c, L);
    }
    for (int S = 1; S <= MAX_WAYS && S <= n; S++)
        for (int T = 1; T <= MAX_WAYS && S * T <= n; T++) {
            if (n % (S * T) || (S == 1 && T == 1)) continue;
            for (int f = 1; f <= (S > 1 ? 4 : 1); f *= 2) {
                sh_plan_layout L = base;
                L.kind = SH_PLAN_PIPE;
                L.S = S, L.T = T, L.M = S * f;
                if ((m->batch / m->time_steps) % L.M == 0 || f == 1) add(out, m, c, L);
            }
        }
    for (int s = SH_HYBRID_BROADCAST; s <= SH_HYBRID_HORIZONTAL; s++) {
        sh_plan_layout L = base;
        L.kind = SH_PLAN_HYBRID;
        L.scheme = s;
        add(out, m, c, L);
    }
sort:
    qsort(out->l, (size_t)out->n, sizeof out->l[0], by_speed);
    out->best = out->n > 0 && out->l[0].ok ? 0 : -1;
}

static void sum_times(const sh_plan_model *m, double *fwd, double *bwd)
{
    *fwd = *bwd = 0;
    for (int l = 0; l < m->nlayers; l++) {
        *fwd += sh_plan_part_s(m, l, 0, m->batch);
        *bwd += sh_plan_part_s(m, l, 1, m->batch);
    }
}

void sh_plan_print(const sh_plan_model *m, const sh_plan_cluster *c, const sh_plan_list *list, FILE *out)
{
    int n = c->hosts * c->ranks_per_host;
    double fwd, bwd;
    sum_times(m, &fwd, &bwd);
    fprintf(out, "plan for %s: %d host%s x %d rank%s (%d ranks), batch %d a replica, %d kernel thread%s a rank, "
            "%d cores a %s\n", m->cfg_path, c->hosts, c->hosts == 1 ? "" : "s", c->ranks_per_host,
            c->ranks_per_host == 1 ? "" : "s", n, m->batch, m->threads, m->threads == 1 ? "" : "s", c->cores,
            c->machine_hosts > 1 ? "machine that the hosts share" : "host");
    fprintf(out, "links: across hosts %s (%.1f MB/s, %.0f us, %.2f ns of CPU a byte); shared memory %.0f MB/s (%s)\n",
            c->link, 1e-6 / c->net_s_per_byte, c->net_alpha_s * 1e6, c->net_cpu_s_per_byte * 1e9,
            1e-6 / c->shm_s_per_byte, c->shm);
    fprintf(out, "measured here: forward %.2f ms, backward %.2f ms a replica's batch; optimizer %.2f ms; "
            "%zu parameters\n", fwd * 1e3, bwd * 1e3, m->optim_s * 1e3, m->nparams);
    fprintf(out, "codecs, ns a value encoded / a payload's value decoded:");
    for (int k = 0; k < SH_PLAN_NCODECS; k++)
        fprintf(out, " %s %.2f / %.2f%s", codec_names[k], m->enc_s[k] * 1e9, m->dec_s[k] * 1e9,
                k + 1 < SH_PLAN_NCODECS ? ";" : "\n");
    fprintf(out, "%12s %10s %9s %9s %9s   %s\n", "images/s", "step ms", "compute", "comm", "bubble", "layout (flags)");
    for (int i = 0; i < list->n; i++) {
        const sh_plan_layout *L = &list->l[i];
        if (!L->ok) continue;
        fprintf(out, "%12.1f %10.2f %9.2f %9.2f %9.2f   %s%s%s%s\n", L->images_per_s, L->step_s * 1e3,
                L->compute_s * 1e3, L->comm_s * 1e3, L->bubble_s * 1e3, L->name, L->flags[0] ? " (" : "",
                L->flags, L->flags[0] ? ")" : "");
    }
    for (int i = 0; i < list->n; i++)
        if (!list->l[i].ok) fprintf(out, "not possible: %s: %s\n", list->l[i].name, list->l[i].why);
    if (list->best < 0) {
        fprintf(out, "choice: none of the layouts runs\n");
        return;
    }
    const sh_plan_layout *b = &list->l[list->best];
    fprintf(out, "choice: %s, %.1f images/s predicted: shoal train %s -n %d%s%s\n", b->name, b->images_per_s,
            m->cfg_path, n, b->flags[0] ? " " : "", b->flags);
}

static void json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', out);
        fputc(*s, out);
    }
    fputc('"', out);
}

static void json_layout(FILE *out, const sh_plan_layout *L)
{
    fprintf(out, "{\"layout\":");
    json_str(out, L->name);
    fprintf(out, ",\"flags\":");
    json_str(out, L->flags);
    if (!L->ok) {
        fprintf(out, ",\"possible\":false,\"why\":");
        json_str(out, L->why);
        fprintf(out, "}");
        return;
    }
    fprintf(out, ",\"possible\":true,\"images_per_s\":%.2f,\"step_ms\":%.4f,\"compute_ms\":%.4f,\"comm_ms\":%.4f,"
            "\"bubble_ms\":%.4f,\"images_per_step\":%.0f}", L->images_per_s, L->step_s * 1e3, L->compute_s * 1e3,
            L->comm_s * 1e3, L->bubble_s * 1e3, L->images_per_step);
}

void sh_plan_print_json(const sh_plan_model *m, const sh_plan_cluster *c, const sh_plan_list *list, FILE *out)
{
    double fwd, bwd;
    sum_times(m, &fwd, &bwd);
    fprintf(out, "{\"cfg\":");
    json_str(out, m->cfg_path);
    fprintf(out, ",\"hosts\":%d,\"ranks_per_host\":%d,\"batch\":%d,\"threads\":%d,\"cores\":%d,"
            "\"machine_hosts\":%d,\"link\":", c->hosts, c->ranks_per_host, m->batch, m->threads, c->cores,
            c->machine_hosts > 1 ? c->machine_hosts : 1);
    json_str(out, c->link);
    fprintf(out, ",\"net_mb_s\":%.3f,\"net_latency_us\":%.3f,\"net_cpu_ns_per_byte\":%.4f,\"shm_mb_s\":%.3f,"
            "\"forward_ms\":%.4f,\"backward_ms\":%.4f,\"optimizer_ms\":%.4f,\"codec_ns\":{",
            1e-6 / c->net_s_per_byte, c->net_alpha_s * 1e6, c->net_cpu_s_per_byte * 1e9, 1e-6 / c->shm_s_per_byte,
            fwd * 1e3, bwd * 1e3, m->optim_s * 1e3);
    for (int k = 0; k < SH_PLAN_NCODECS; k++) /* a value's encoding and one payload's decoding */
        fprintf(out, "%s\"%s\":[%.4f,%.4f]", k ? "," : "", codec_names[k], m->enc_s[k] * 1e9, m->dec_s[k] * 1e9);
    fprintf(out, "},\"layouts\":[");
    for (int i = 0; i < list->n; i++) {
        if (i) fputc(',', out);
        json_layout(out, &list->l[i]);
    }
    fprintf(out, "],\"choice\":");
    if (list->best >= 0) json_layout(out, &list->l[list->best]);
    else fprintf(out, "null");
    fprintf(out, "}\n");
}
