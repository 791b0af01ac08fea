"""hello.py — one rank of tests/python/test_launchers.py: join the job the launcher started,
sum the ranks, print what this rank sees."""
import numpy as np

import shoal

comm = shoal.init()
a = np.array([comm.rank], dtype=np.int64)
comm.allreduce(a)
env = shoal.job_env()
print("rank %d of %d: sum %d, launcher %s" % (comm.rank, comm.size, a[0], env["launcher"]), flush=True)
