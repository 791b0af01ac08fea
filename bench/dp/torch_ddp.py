#!/usr/bin/python3
"""torch_ddp.py - the PyTorch side of bench/dp/run.sh: DistributedDataParallel over the gloo
backend (python3-torch, CPU), N processes on this machine, one thread each, weak scaling
(every rank trains on its own batch of 64 Fashion-MNIST images per step), SGD lr 0.01
momentum 0.9 weight decay 5e-4. Rank 0 prints one JSON object: aggregate images/s over
`steps` steps after `warmup`.
With --from-env it is one rank of a job started elsewhere (torchrun, scripts/netlab.sh run):
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the environment.
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def model_for(name):
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2, 2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2, 2),
                             nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10))
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    if name == "mlp-wide":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 3072), nn.ReLU(), nn.Linear(3072, 2560), nn.ReLU(),
                             nn.Linear(2560, 10))
    sys.exit("unknown model " + name)


def load(ddir):
    def find(stem):
        for name in (stem + ".gz", stem):
            if os.path.exists(os.path.join(ddir, name)):
                return os.path.join(ddir, name)
        sys.exit("torch_ddp: no %s in %s" % (stem, ddir))

    def read(path):
        with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
            return f.read()

    im = read(find("train-images-idx3-ubyte"))
    n = struct.unpack(">IIII", im[:16])[1]
    images = torch.frombuffer(bytearray(im[16:]), dtype=torch.uint8).view(n, 1, 28, 28)
    lb = read(find("train-labels-idx1-ubyte"))
    labels = torch.frombuffer(bytearray(lb[8:]), dtype=torch.uint8).long()
    return images, labels


def worker(rank, args, port):
    torch.set_num_threads(1)
    init = "env://" if args.from_env else "tcp://127.0.0.1:%d" % port
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=args.nranks)
    torch.manual_seed(1)
    images, labels = load(args.data)
    model = nn.parallel.DistributedDataParallel(model_for(args.model))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    g = torch.Generator().manual_seed(1)
    order = torch.randperm(images.shape[0], generator=g)
    b, n = args.batch, args.nranks
    per_epoch = images.shape[0] // (b * n)
    start = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        k = step % per_epoch
        idx = order[(k * n + rank) * b:(k * n + rank + 1) * b]
        x = images[idx].float().div_(255.0)
        y = labels[idx]
        opt.zero_grad(set_to_none=False)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    dist.barrier()
    secs = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({"images_per_s": args.steps * b * n / secs, "ranks": n, "model": args.model}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="lenet", choices=["lenet", "mlp", "mlp-wide"])
    p.add_argument("--nranks", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--port", type=int, default=29611)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--from-env", action="store_true", help="one rank; RANK, WORLD_SIZE, MASTER_* from the environment")
    args = p.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.from_env:
        args.nranks = int(os.environ["WORLD_SIZE"])
        worker(int(os.environ["RANK"]), args, 0)
        return
    mp.spawn(worker, args=(args, args.port), nprocs=args.nranks, join=True)


if __name__ == "__main__":
    main()
