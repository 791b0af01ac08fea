/* cpus.h — how many kernel threads one rank gets: the one rule every caller uses (the
 * trainer and the job, shoal test, shoal time, the public net API).
 * Not here: who counts the ranks on this host (the communicator, or shoal_job_env_read in
 * shoal/comm.h), the thread pool itself (src/nn/threads.c).
 * Proved by tests/base/test_cpus.c and tests/cli/test_train_dp.c (ranks without --threads). */
#ifndef SH_CPUS_H
#define SH_CPUS_H

/* Where a thread count came from, for the log line that states it. */
typedef enum { SH_CPUS_REQUESTED = 0, SH_CPUS_ENV, SH_CPUS_PINNED, SH_CPUS_SHARED } sh_cpus_source;

/* CPUs this process may run on (sched_getaffinity; the online count when that fails). */
int sh_cpus_available(void);
/* CPUs online on this host. */
int sh_cpus_online(void);

/* Kernel threads for one rank, at least 1:
 *   requested > 0          requested (--threads)
 *   SHOAL_THREADS > 0      that
 *   pinned to a subset     the CPUs it may run on: a launcher that binds (shoal launch,
 *                          mpirun, srun --cpu-bind) already gave it its share
 *   otherwise              the CPUs it may run on divided by local_ranks, the ranks on this
 *                          host (<= 0 counts as 1)
 * *source (may be NULL) says which line applied. Reads the environment and the affinity
 * mask; never fails. */
int sh_cpus_threads_per_rank(int requested, int local_ranks, sh_cpus_source *source);
/* "--threads", "SHOAL_THREADS", "the CPUs this rank is pinned to", "the CPUs shared by the
 * ranks on this host" */
const char *sh_cpus_source_name(sh_cpus_source s);

#endif
