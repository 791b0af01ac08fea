/* test_tb_read.c — proves src/io/tb_read.c's series index: many distinct tags are read in
 * linear time (200k tags took over a minute when each was searched for linearly), each tag
 * finds its own series, and tags longer than a series holds share the cut name. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "io/tb_read.h"

static void many_tags_each_find_their_series(void)
{
    sh_tb_run r;
    memset(&r, 0, sizeof r);
    enum { NTAGS = 200000 };
    char tag[64];
    for (int i = 0; i < NTAGS; i++) {
        snprintf(tag, sizeof tag, "layer%d/w", i);
        if (sh_tb_run_add(&r, tag, i, 1.0, (double)i) != SHOAL_OK) break;
    }
    for (int i = 0; i < NTAGS; i += 7) {
        snprintf(tag, sizeof tag, "layer%d/w", i);
        CHECK(sh_tb_run_add(&r, tag, i + 1, 2.0, -(double)i) == SHOAL_OK, "second point");
    }
    CHECK(r.nseries == NTAGS, "%d series", r.nseries);
    int bad = 0;
    for (int i = 0; i < NTAGS; i++) {
        snprintf(tag, sizeof tag, "layer%d/w", i);
        const sh_tb_series *s = sh_tb_run_find(&r, tag);
        size_t want = i % 7 == 0 ? 2 : 1;
        if (!s || strcmp(s->tag, tag) || s->n != want || s->value[0] != (double)i) bad++;
    }
    CHECK(bad == 0, "%d tags lost their series", bad);
    CHECK(sh_tb_run_find(&r, "no/such") == NULL, "unknown tag");
    sh_tb_run_fini(&r);
}

static void long_tags_are_cut_to_one_series(void)
{
    sh_tb_run r;
    memset(&r, 0, sizeof r);
    char a[400], b[400];
    memset(a, 'x', sizeof a - 1);
    a[sizeof a - 1] = 0;
    memcpy(b, a, sizeof b);
    b[sizeof b - 2] = 'y'; /* differs only past what a series holds */
    CHECK(sh_tb_run_add(&r, a, 1, 1.0, 1.0) == SHOAL_OK, "add a");
    CHECK(sh_tb_run_add(&r, b, 2, 1.0, 2.0) == SHOAL_OK, "add b");
    CHECK(r.nseries == 1 && r.series[0].n == 2, "%d series", r.nseries);
    CHECK(sh_tb_run_find(&r, a) == &r.series[0], "found by the long name");
    sh_tb_run_fini(&r);
}

int main(void)
{
    check_begin("test_tb_read", 60);
    RUN(many_tags_each_find_their_series);
    RUN(long_tags_are_cut_to_one_series);
    return check_end();
}
