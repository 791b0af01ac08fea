/* progress.c — the progress line: a moving-window rate and ETA, drawn in place with \r on a
 * terminal, or as plain lines every K steps elsewhere.
 * Not here: the numbers themselves (the trainer). Proved by tests/io/test_progress.c. */
#include "io/progress.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/util.h"

/* Steps in the moving window: long enough to smooth jitter, short enough to follow changes. */
#define WINDOW_STEPS 32
#define LINE_NBYTES 256

struct sh_progress {
    sh_progress_opts o;
    int is_tty;
    /* Ring of (time, steps done) samples; the oldest and the newest give rate and ETA. */
    uint64_t t_ns[WINDOW_STEPS + 1];
    int64_t done[WINDOW_STEPS + 1];
    int head, nsamples;
    int64_t steps_done;       /* since create */
    uint64_t last_draw_ns;
    int line_open;            /* a live line is on screen without its newline */
    uint64_t created_ns;      /* for the time limit */
    sh_progress_view last;
};

size_t sh_progress_format_duration(double s, char *buf, size_t nbytes)
{
    int n;
    if (!(s >= 0) || s > 1e9) n = snprintf(buf, nbytes, "?");
    else {
        long t = (long)(s + 0.5);
        if (t < 60) n = snprintf(buf, nbytes, "%lds", t);
        else if (t < 3600) n = snprintf(buf, nbytes, "%ldm%02lds", t / 60, t % 60);
        else if (t < 86400) n = snprintf(buf, nbytes, "%ldh%02ldm", t / 3600, t % 3600 / 60);
        else n = snprintf(buf, nbytes, "%ldd%02ldh", t / 86400, t % 86400 / 3600);
    }
    if (n < 0) n = 0;
    return (size_t)n < nbytes ? (size_t)n : (nbytes ? nbytes - 1 : 0);
}

/* Append to buf at *len, never past nbytes (a short buffer cuts the line, as snprintf does). */
__attribute__((format(printf, 4, 5))) static void appendf(char *buf, size_t nbytes, size_t *len,
                                                          const char *fmt, ...)
{
    if (*len + 1 >= nbytes) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, nbytes - *len, fmt, ap);
    va_end(ap);
    if (n > 0) *len += (size_t)n < nbytes - *len ? (size_t)n : nbytes - *len - 1;
}

#define APPEND(...) appendf(buf, nbytes, &len, __VA_ARGS__)

size_t sh_progress_format(const sh_progress_view *v, char *buf, size_t nbytes)
{
    size_t len = 0;
    if (!nbytes) return 0;
    buf[0] = 0;
    if (v->epochs > 0) APPEND("epoch %lld/%lld", (long long)v->epoch, (long long)v->epochs);
    else APPEND("epoch %lld", (long long)v->epoch);
    if (v->steps > 0) APPEND("  step %lld/%lld", (long long)v->step, (long long)v->steps);
    else APPEND("  step %lld", (long long)v->step);
    if (!isnan(v->loss)) APPEND("  %s %.4f", v->loss_name ? v->loss_name : "loss", v->loss);
    if (v->acc >= 0) APPEND("  acc %.1f%%", 100.0 * v->acc);
    if (v->img_per_s > 0)
        APPEND(v->img_per_s < 10 ? "  %.1f %s/s" : "  %.0f %s/s", v->img_per_s,
               v->item_name ? v->item_name : "img");
    if (v->eta_s >= 0) {
        char d[32];
        sh_progress_format_duration(v->eta_s, d, sizeof d);
        APPEND("  ETA %s", d);
    }
    return len;
}

void sh_progress_opts_default(sh_progress_opts *o)
{
    memset(o, 0, sizeof *o);
    o->log_every_steps = 100;
    o->is_tty = -1;
    o->min_redraw_s = 0.1;
}

shoal_result sh_progress_create(const sh_progress_opts *o, sh_progress **out)
{
    sh_progress *p = NULL;
    *out = NULL;
    if (!o) return SH_FAIL(SHOAL_ERR_INVALID, "progress: options are required");
    SH_TRY(sh_calloc(1, sizeof *p, (void **)&p));
    p->o = *o;
    if (!p->o.out) p->o.out = stderr;
    if (p->o.log_every_steps <= 0) p->o.log_every_steps = 100;
    if (p->o.min_redraw_s <= 0) p->o.min_redraw_s = 0.1;
    int fd = fileno(p->o.out);
    p->is_tty = o->is_tty >= 0 ? o->is_tty : fd >= 0 && isatty(fd);
    p->nsamples = 0;
    p->created_ns = sh_now_ns();
    *out = p;
    return SHOAL_OK;
}

static void push_sample(sh_progress *p, uint64_t now_ns)
{
    p->head = (p->head + 1) % (WINDOW_STEPS + 1);
    p->t_ns[p->head] = now_ns;
    p->done[p->head] = p->steps_done;
    if (p->nsamples < WINDOW_STEPS + 1) p->nsamples++;
}

static void draw(sh_progress *p, int newline)
{
    char line[LINE_NBYTES];
    sh_progress_format(&p->last, line, sizeof line);
    if (p->is_tty) {
        /* \r back to column 0, the text, then erase what a longer earlier line left. */
        fprintf(p->o.out, "\r%s\033[K%s", line, newline ? "\n" : "");
        p->line_open = !newline;
    } else {
        fprintf(p->o.out, "%s\n", line);
    }
    fflush(p->o.out);
}

void sh_progress_step_at(sh_progress *p, uint64_t now_ns, int64_t epoch, int64_t step,
                         double loss, double acc)
{
    /* The first report has no earlier time: its sample starts the window. */
    p->steps_done++;
    push_sample(p, now_ns);
    sh_progress_view *v = &p->last;
    int64_t per = p->o.steps_per_epoch;
    int64_t last = p->o.last_step > 0 ? p->o.last_step : p->o.epochs > 0 && per > 0 ? p->o.epochs * per : 0;
    v->epoch = epoch + 1;
    v->epochs = p->o.epochs;
    v->step = step + 1;
    v->steps = per;
    if (last > 0 && per > 0 && epoch == (last - 1) / per) v->steps = last - epoch * per; /* it ends early */
    v->loss = loss;
    v->acc = isnan(acc) ? -1 : acc;
    v->img_per_s = 0;
    v->eta_s = -1;
    v->loss_name = p->o.loss_name;
    v->item_name = p->o.item_name;
    if (p->nsamples >= 2) {
        int oldest = (p->head - (p->nsamples - 1) + (WINDOW_STEPS + 1)) % (WINDOW_STEPS + 1);
        double dt_s = (double)(now_ns - p->t_ns[oldest]) * 1e-9;
        int64_t dsteps = p->steps_done - p->done[oldest];
        if (dt_s > 0 && dsteps > 0) {
            double s_per_step = dt_s / (double)dsteps;
            if (p->o.images_per_step > 0)
                v->img_per_s = (double)p->o.images_per_step / s_per_step;
            if (last > 0 && per > 0) {
                int64_t left = last - (epoch * per + step + 1);
                v->eta_s = left > 0 ? (double)left * s_per_step : 0;
            }
        }
    }
    if (p->o.time_limit_s > 0) { /* the run ends at the limit if not before */
        double left_s = p->o.time_limit_s - (double)(now_ns - p->created_ns) * 1e-9;
        if (left_s < 0) left_s = 0;
        if (v->eta_s < 0 || left_s < v->eta_s) v->eta_s = left_s;
    }
    int last_of_epoch = v->steps > 0 && step + 1 == v->steps;
    if (p->is_tty) {
        if (last_of_epoch || now_ns - p->last_draw_ns >= (uint64_t)(p->o.min_redraw_s * 1e9) ||
            !p->line_open) {
            draw(p, 0);
            p->last_draw_ns = now_ns;
        }
    } else if ((step + 1) % p->o.log_every_steps == 0 || last_of_epoch) {
        draw(p, 0);
    }
}

void sh_progress_step(sh_progress *p, int64_t epoch, int64_t step, double loss, double acc)
{
    sh_progress_step_at(p, sh_now_ns(), epoch, step, loss, acc);
}

void sh_progress_epoch_end(sh_progress *p, const char *extra)
{
    if (p->is_tty && p->line_open) {
        if (extra && *extra) fprintf(p->o.out, "  %s", extra);
        fputc('\n', p->o.out);
        p->line_open = 0;
    } else if (extra && *extra) {
        fprintf(p->o.out, "epoch %lld: %s\n", (long long)p->last.epoch, extra);
    }
    fflush(p->o.out);
}

void sh_progress_clear(sh_progress *p)
{
    if (p->is_tty && p->line_open) {
        fputs("\r\033[K", p->o.out);
        fflush(p->o.out);
        p->line_open = 0;
    }
}

void sh_progress_destroy(sh_progress *p)
{
    if (!p) return;
    if (p->is_tty && p->line_open) {
        fputc('\n', p->o.out);
        fflush(p->o.out);
    }
    free(p);
}
