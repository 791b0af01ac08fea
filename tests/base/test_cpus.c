/* test_cpus.c — proves src/base/cpus.c, the rule for a rank's kernel threads: --threads
 * wins, then SHOAL_THREADS, then a process pinned to a subset keeps its CPUs, else the CPUs
 * are divided by the ranks on the host, never below 1.
 * Not here: the ranks as processes (tests/cli/test_train_dp.c runs them without --threads). */
#include <sched.h>
#include <stdlib.h>

#include "base/cpus.h"
#include "check.h"

static void requested_wins(void)
{
    sh_cpus_source why;
    setenv("SHOAL_THREADS", "5", 1);
    CHECK(sh_cpus_threads_per_rank(3, 8, &why) == 3 && why == SH_CPUS_REQUESTED, "requested");
    CHECK(sh_cpus_threads_per_rank(0, 8, &why) == 5 && why == SH_CPUS_ENV, "SHOAL_THREADS");
    unsetenv("SHOAL_THREADS");
}

static void unpinned_cpus_are_divided_by_local_ranks(void)
{
    sh_cpus_source why;
    int avail = sh_cpus_available();
    if (avail < sh_cpus_online()) {
        printf("test_cpus: this process is pinned (%d of %d CPUs): division not testable\n", avail,
               sh_cpus_online());
        return;
    }
    CHECK(sh_cpus_threads_per_rank(0, 0, &why) == avail && why == SH_CPUS_SHARED, "alone: %d",
          sh_cpus_threads_per_rank(0, 0, NULL));
    CHECK(sh_cpus_threads_per_rank(0, 2, NULL) == (avail / 2 > 0 ? avail / 2 : 1), "two ranks");
    CHECK(sh_cpus_threads_per_rank(0, 10000, NULL) == 1, "never below 1");
}

static void pinned_process_keeps_its_cpus(void)
{
    if (sh_cpus_online() < 2) {
        printf("test_cpus: one CPU: pinning not testable\n");
        return;
    }
    cpu_set_t old, one;
    sched_getaffinity(0, sizeof old, &old);
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &old)) {
            CPU_SET(c, &one);
            break;
        }
    CHECK(sched_setaffinity(0, sizeof one, &one) == 0, "cannot pin");
    sh_cpus_source why;
    CHECK(sh_cpus_available() == 1, "available %d", sh_cpus_available());
    CHECK(sh_cpus_threads_per_rank(0, 4, &why) == 1 && why == SH_CPUS_PINNED, "pinned");
    sched_setaffinity(0, sizeof old, &old);
}

int main(void)
{
    check_begin("test_cpus", 30);
    unsetenv("SHOAL_THREADS");
    RUN(requested_wins);
    RUN(unpinned_cpus_are_divided_by_local_ranks);
    RUN(pinned_process_keeps_its_cpus);
    return check_end();
}
