/* cpus.c — how many kernel threads one rank gets (see cpus.h for the rule).
 * Not here: counting the ranks on a host (the communicator), the pool (src/nn/threads.c).
 * Proved by tests/base/test_cpus.c and tests/cli/test_train_dp.c (ranks without --threads). */
#include "base/cpus.h"

#include <sched.h>
#include <unistd.h>

#include "base/env.h"

int sh_cpus_online(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int sh_cpus_available(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return sh_cpus_online();
    int n = CPU_COUNT(&set);
    return n > 0 ? n : 1;
}

int sh_cpus_threads_per_rank(int requested, int local_ranks, sh_cpus_source *source)
{
    sh_cpus_source dummy;
    if (!source) source = &dummy;
    *source = SH_CPUS_REQUESTED;
    if (requested > 0) return requested;
    long env = 0;
    *source = SH_CPUS_ENV;
    if (sh_env_long("SHOAL_THREADS", &env) == SHOAL_OK && env > 0) return (int)env;
    int avail = sh_cpus_available();
    /* Pinned to fewer CPUs than the host has: the launcher already divided them (dividing
     * again by the local ranks would leave cores idle). */
    if (avail < sh_cpus_online()) {
        *source = SH_CPUS_PINNED;
        return avail;
    }
    *source = SH_CPUS_SHARED;
    int t = avail / (local_ranks > 0 ? local_ranks : 1);
    return t < 1 ? 1 : t;
}

const char *sh_cpus_source_name(sh_cpus_source s)
{
    switch (s) {
    case SH_CPUS_REQUESTED: return "--threads";
    case SH_CPUS_ENV: return "SHOAL_THREADS";
    case SH_CPUS_PINNED: return "the CPUs this rank is pinned to";
    case SH_CPUS_SHARED: return "the CPUs shared by the ranks on this host";
    }
    return "?";
}
