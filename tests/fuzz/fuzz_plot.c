/* fuzz_plot.c — libFuzzer target: arbitrary files through what `shoal plot` reads besides
 * event files: the JSON reader (src/io/json.c) and, on top of it and of plain text, the
 * readers of src/io/plot_data.c: a --timeline trace's step breakdown, a benchmark's curve
 * (shoal bench --json, JSON lines, nccl-tests tables) and a `shoal train --json` history.
 * Input: mode u8 (mod 4: 0 the JSON reader alone, then every accessor on the tree; 1 the
 * breakdown, steps [lo, lo + span) from the mode's high bits; 2 the benchmark curve; 3 the
 * train history) · the file. Not here: drawing (svg_plot.c), flags (cmd_plot.c).
 * Driven by scripts/fuzz.sh and tests/fuzz/test_fuzz_plot.c. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "io/json.h"
#include "io/plot_data.h"

/* Every node, by every accessor: what a caller walking a hostile tree does. */
static void fuzz_plot_walk(const sh_json *v, int depth)
{
    if (depth > 200) abort(); /* the reader bounds nesting at 64 */
    if (v->kind == SH_JSON_STR && !v->str) abort();
    for (size_t i = 0; (v->kind == SH_JSON_ARR || v->kind == SH_JSON_OBJ) && i < v->n; i++) {
        if (v->kind == SH_JSON_OBJ) {
            if (!v->keys[i] || sh_json_get(v, v->keys[i]) == NULL) abort();
            (void)sh_json_num(v, v->keys[i], 0);
            (void)sh_json_str(v, v->keys[i]);
        }
        fuzz_plot_walk(&v->items[i], depth + 1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    char path[128], err[256];
    if (data[0] % 4 == 0) {
        char *text = malloc(size);
        if (!text) return 0;
        memcpy(text, data + 1, size - 1);
        text[size - 1] = 0;
        sh_json *v = sh_json_parse(text, err, sizeof err);
        if (v) fuzz_plot_walk(v, 0);
        sh_json_free(v);
        free(text);
        return 0;
    }
    fuzz_write(fuzz_path("plot.json", path, sizeof path), data + 1, size - 1, 0);
    if (data[0] % 4 == 1) {
        sh_breakdown b;
        memset(&b, 0, sizeof b);
        int64_t lo = data[0] >> 4 & 3, span = data[0] >> 6;
        (void)sh_breakdown_read(path, lo, span ? lo + span : -1, &b);
        sh_breakdown_fini(&b);
    } else if (data[0] % 4 == 2) {
        sh_bench_curve c;
        memset(&c, 0, sizeof c);
        (void)sh_bench_curve_read(path, &c);
        sh_bench_curve_fini(&c);
    } else {
        sh_tb_run r;
        memset(&r, 0, sizeof r);
        (void)sh_train_json_read(path, &r);
        sh_tb_run_fini(&r);
    }
    return 0;
}
