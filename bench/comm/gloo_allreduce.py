#!/usr/bin/python3
"""gloo_allreduce.py - the torch.distributed side of bench/comm/run.sh: gloo allreduce
(float32 sum, in place, as gloo does it) on N local processes, timed like nccl-tests (mean
over iterations of the slowest rank); rank 0 prints one JSON row per size, MIN,
MIN*FACTOR, ... and MAX itself.
  python3 bench/comm/gloo_allreduce.py --nranks 2 --min 8 --max 67108864 --factor 4
With --from-env it is one rank of a job started elsewhere (torchrun, scripts/netlab.sh run):
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the environment.
  scripts/netlab.sh run 1 -- python3 bench/comm/gloo_allreduce.py --from-env --min 4194304 --max 4194304
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, a):
    torch.set_num_threads(1)
    init = "env://" if a.from_env else "tcp://127.0.0.1:%d" % a.port
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=a.nranks)
    n = a.nranks
    nb = a.min
    while True:
        t = torch.ones(nb // 4, dtype=torch.float32)
        iters = a.small if nb <= (1 << 20) else a.large
        for _ in range(max(2, iters // 10)):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        el = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(el, op=dist.ReduceOp.MAX)
        if rank == 0:
            s = float(el[0])
            print(json.dumps({"size": nb, "time_us": s * 1e6,
                              "busbw_gb_s": nb / s / 1e9 * 2.0 * (n - 1) / n if n > 1 else 0.0}), flush=True)
        if nb >= a.max:
            break
        nb = min(nb * a.factor, a.max)  # the last size is MAX itself, as shoal bench does
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nranks", type=int, default=2)
    p.add_argument("--min", type=int, default=8)
    p.add_argument("--max", type=int, default=1 << 26)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--small", type=int, default=200)
    p.add_argument("--large", type=int, default=10)
    p.add_argument("--port", type=int, default=29811)
    p.add_argument("--from-env", action="store_true", help="one rank; RANK, WORLD_SIZE, MASTER_* from the environment")
    a = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if a.from_env:
        a.nranks = int(os.environ["WORLD_SIZE"])
        worker(int(os.environ["RANK"]), a)
        return
    mp.spawn(worker, args=(a,), nprocs=a.nranks, join=True)


if __name__ == "__main__":
    main()
