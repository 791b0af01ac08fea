"""allreduce.py — shoal's collectives on numpy arrays, as mpi4py users write them.

    shoal launch -n 4 python3 examples/python/allreduce.py      (or mpirun -np 4, srun -n 4)
"""
import numpy as np

import shoal

comm = shoal.init()                       # every rank the launcher started; alone: one rank
rank, size = comm.rank, comm.size

a = np.full(1 << 20, rank, dtype=np.float32)
comm.allreduce(a)                         # in place: the sum over the ranks
assert a[0] == size * (size - 1) / 2

b = np.empty_like(a)
comm.allreduce(a, op="avg", out=b)        # into out; ops: sum avg min max prod

h = comm.allreduce_start(a, op="max")     # non-blocking: returns at once
busy = 0
while not h.test():                       # ... compute something meanwhile ...
    busy += 1
h.wait()

v = np.array([rank * 10.0])
comm.broadcast(v, root=0)                 # rank 0's value everywhere
everyone = comm.allgather(np.array([rank], dtype=np.int64))   # shape (size, 1)

if size > 1:                              # tagged point-to-point, around a ring
    comm.send(np.array([rank], dtype=np.int32), (rank + 1) % size, tag=7)
    got = comm.recv(np.empty(1, dtype=np.int32), (rank - 1) % size, tag=7)

half = comm.split(color=rank % 2)         # even and odd ranks
half.barrier()
print("rank %d of %d: sum %g, avg %g, ranks %s, half of %d" % (rank, size, a[0], b[0], everyone.ravel().tolist(),
                                                                 half.size))
