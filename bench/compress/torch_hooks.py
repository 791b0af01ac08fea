#!/usr/bin/python3
"""torch_hooks.py - the PyTorch side of bench/compress/run.sh: DistributedDataParallel over
gloo (CPU) with one of its communication hooks: none (float32 allreduce), fp16
(fp16_compress_hook), bf16 (bf16_compress_hook) or powersgd:R (powerSGD_hook, rank R, error
feedback and warm start on). Weak scaling as shoal's: every rank trains on its own batch of
64 Fashion-MNIST images per step, SGD with the .cfg's learning rate, momentum 0.9, weight
decay 5e-4. After every epoch rank 0 tests on the whole test set and prints one JSON line:
{"epoch", "seconds" (since the start, evaluation included), "accuracy", "steps",
"tx_bytes" (bytes this rank's interface sent since the start, from /proc/net/dev)}.

Started by scripts/netlab.sh run (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the
environment) it is one rank; otherwise it spawns --nranks ranks on this machine.
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
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

LR = {"lenet": 0.01, "mlp-wide": 0.05, "fc-heavy": 0.01}


def model_for(name):
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2, 2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2, 2),
                             nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10))
    if name == "mlp-wide":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 3072), nn.ReLU(), nn.Linear(3072, 2560), nn.ReLU(),
                             nn.Linear(2560, 10))
    if name == "fc-heavy":  # examples/fc-heavy.cfg
        return nn.Sequential(nn.Conv2d(1, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
                             nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten(),
                             nn.Linear(6272, 1536), nn.ReLU(), nn.Linear(1536, 1536), nn.ReLU(),
                             nn.Linear(1536, 10))
    sys.exit("torch_hooks: unknown model " + name)


def load(ddir, prefix):
    def find(stem):
        for name in (stem + ".gz", stem):
            if os.path.exists(os.path.join(ddir, name)):
                return os.path.join(ddir, name)
        sys.exit("torch_hooks: no %s in %s" % (stem, ddir))

    def read(path):
        with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
            return f.read()

    im = read(find(prefix + "-images-idx3-ubyte"))
    n = struct.unpack(">IIII", im[:16])[1]
    images = torch.frombuffer(bytearray(im[16:]), dtype=torch.uint8).view(n, 1, 28, 28)
    lb = read(find(prefix + "-labels-idx1-ubyte"))
    labels = torch.frombuffer(bytearray(lb[8:]), dtype=torch.uint8).long()
    return images, labels


def theory_bytes(model, hook, world):
    """Bytes one rank sends per step by the ring allreduce's count (2 (n-1)/n of the payload)."""
    ring = 2.0 * (world - 1) / world
    total = 0.0
    for p in model.parameters():
        n = p.numel()
        if hook in ("fp16", "bf16"):
            total += 2 * n
        elif hook.startswith("powersgd:") and p.dim() > 1:
            r, rows = int(hook.split(":")[1]), p.shape[0]
            cols = n // rows
            r = min(r, rows, cols)
            # PowerSGDState's min_compression_rate 2: compressed where that saves 2x
            total += 4 * r * (rows + cols) if rows * cols >= 2 * r * (rows + cols) else 4 * n
        else:
            total += 4 * n
    return ring * total


def tx_bytes(ifname):
    with open("/proc/net/dev") as f:
        for line in f:
            if line.strip().startswith(ifname + ":"):
                return int(line.split(":", 1)[1].split()[8])
    return 0


def worker(rank, world, args, init):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.manual_seed(args.seed)
    images, labels = load(args.data, "train")
    timages, tlabels = load(args.data, "t10k")
    # powerSGD_hook on gloo (torch 1.13 here) may abort with gloo's "op.preamble.length <=
    # op.nbytes" (it starts the biases' allreduce and the P allreduce at once); one bucket
    # at least keeps the buckets' hooks apart. run.sh records such a run as failed.
    cap = 1024 if args.hook.startswith("powersgd") else 25
    model = nn.parallel.DistributedDataParallel(model_for(args.model), bucket_cap_mb=cap)
    if args.hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.hook == "bf16":
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif args.hook.startswith("powersgd:"):
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=int(args.hook.split(":")[1]),
                                   start_powerSGD_iter=10, use_error_feedback=True, warm_start=True)
        model.register_comm_hook(state, psgd.powerSGD_hook)
    elif args.hook != "none":
        sys.exit("torch_hooks: unknown hook " + args.hook)
    opt = torch.optim.SGD(model.parameters(), lr=LR[args.model], momentum=0.9, weight_decay=5e-4)
    b = args.batch
    per_epoch = images.shape[0] // (b * world)
    if args.max_steps:
        per_epoch = min(per_epoch, args.max_steps)
    ifname = os.environ.get("GLOO_SOCKET_IFNAME", "lo")
    dist.barrier()
    start, tx0, steps = time.perf_counter(), tx_bytes(ifname), 0
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(args.seed + epoch)
        order = torch.randperm(images.shape[0], generator=g)
        model.train()
        for k in range(per_epoch):
            idx = order[(k * world + rank) * b:(k * world + rank + 1) * b]
            x = images[idx].float().div_(255.0)
            opt.zero_grad(set_to_none=False)
            F.cross_entropy(model(x), labels[idx]).backward()
            opt.step()
            steps += 1
        tx = tx_bytes(ifname) - tx0
        if rank == 0:
            model.eval()
            correct = 0
            with torch.no_grad():
                for i in range(0, timages.shape[0], 1000):
                    out = model.module(timages[i:i + 1000].float().div_(255.0))
                    correct += int((out.argmax(1) == tlabels[i:i + 1000]).sum())
            print(json.dumps({"epoch": epoch + 1, "seconds": time.perf_counter() - start,
                              "accuracy": correct / timages.shape[0], "steps": steps, "tx_bytes": tx,
                              "theory_bytes_per_step": theory_bytes(model.module, args.hook, world),
                              "model": args.model, "hook": args.hook, "ranks": world}), flush=True)
        dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="lenet", choices=sorted(LR))
    p.add_argument("--hook", default="none")
    p.add_argument("--nranks", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--max-steps", type=int, default=0, help="steps per epoch at most (tiny runs)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--port", type=int, default=29611)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # one rank of a launched job
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args, "env://")
    else:
        mp.spawn(worker, args=(args.nranks, args, "tcp://127.0.0.1:%d" % args.port), nprocs=args.nranks, join=True)


if __name__ == "__main__":
    main()
