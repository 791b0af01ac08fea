#!/usr/bin/python3
"""torch_mp.py - the PyTorch side of bench/mp/run.sh: model parallelism as PyTorch offers it
(python3-torch, CPU), Fashion-MNIST, SGD lr 0.01 momentum 0.9 weight decay 5e-4. Prints one
JSON object: images/s over `steps` steps after `warmup`.

  --mode pipe  torch.distributed.pipeline.sync.Pipe: the model's layers cut into 2 partitions of
               equal cost, the batch into --chunks micro-batches (GPipe's schedule), in one
               process with --threads intra-op threads (Pipe places partitions on devices;
               on a CPU both are "cpu", so the threads are its only parallelism)
  --mode tp    tensor parallelism wired by hand over gloo (Megatron-LM's f and g): --nranks
               processes of one thread each, every pair of connected layers split as shoal's
               --tensor-parallel splits it (the first by output columns, the second by input
               rows, one allreduce of its output forward and one of the pair's input gradient
               backward); all ranks train on the same batch
  --mode one   the whole model in one process with --threads threads (the baseline)
"""
import argparse
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "dp"))
import torch_ddp  # noqa: E402  (its Fashion-MNIST reader)

# the models of bench/mp: balanced.cfg and examples/mlp-wide.cfg (connected widths)
WIDTHS = {"balanced": [784, 1024, 1024, 1024, 1024, 10], "mlp-wide": [784, 3072, 2560, 10]}


def load(ddir):
    """Fashion-MNIST's training set as bench/dp/torch_ddp.py reads it, images flattened."""
    images, labels = torch_ddp.load(ddir)
    return images.view(images.shape[0], 784), labels


def layers(widths):
    out = []
    for i in range(len(widths) - 1):
        out.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            out.append(nn.ReLU())
    return out


class Batches:
    def __init__(self, args):
        self.images, self.labels = load(args.data)
        g = torch.Generator().manual_seed(1)
        self.order = torch.randperm(self.images.shape[0], generator=g)
        self.b = args.batch
        self.per_epoch = self.images.shape[0] // self.b

    def get(self, step):
        k = step % self.per_epoch
        idx = self.order[k * self.b:(k + 1) * self.b]
        return self.images[idx].float().div_(255.0), self.labels[idx]


def timed(args, model, barrier=None, out=lambda y: y):
    """SGD steps of model on the batches; images/s over the steps after the warm-up."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    data = Batches(args)
    start = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            if barrier:
                barrier()
            start = time.perf_counter()
        x, y = data.get(step)
        opt.zero_grad(set_to_none=False)
        F.cross_entropy(out(model(x)), y).backward()
        opt.step()
    if barrier:
        barrier()
    return args.steps * args.batch / (time.perf_counter() - start)


def run_one(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    return timed(args, nn.Sequential(*layers(WIDTHS[args.model])))


def run_pipe(args):
    from torch.distributed import rpc
    from torch.distributed.pipeline.sync import Pipe
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    tmp = tempfile.NamedTemporaryFile(delete=False)
    rpc.init_rpc("worker", rank=0, world_size=1,
                 rpc_backend_options=rpc.TensorPipeRpcBackendOptions(init_method="file://" + tmp.name))
    seq = layers(WIDTHS[args.model])
    cut = (len(seq) + 1) // 2  # balanced.cfg: two connected layers (and their ReLUs) per partition
    model = Pipe(nn.Sequential(nn.Sequential(*seq[:cut]), nn.Sequential(*seq[cut:])), chunks=args.chunks)
    ips = timed(args, model, out=lambda y: y.local_value())
    rpc.shutdown()
    os.unlink(tmp.name)
    return ips


class CopyToTP(torch.autograd.Function):
    """Megatron's f: identity forward, allreduce of the gradient backward."""
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        dist.all_reduce(g)
        return g


class ReduceFromTP(torch.autograd.Function):
    """Megatron's g: allreduce forward, identity backward."""
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


class TPPair(nn.Module):
    """Two connected layers, the first split by output columns, the second by input rows."""
    def __init__(self, i, k, o, rank, ranks, last_relu):
        super().__init__()
        self.a = nn.Linear(i, k // ranks)
        self.b = nn.Linear(k // ranks, o, bias=False)
        self.bias = nn.Parameter(torch.zeros(o))
        self.last_relu = last_relu

    def forward(self, x):
        h = F.relu(self.a(CopyToTP.apply(x)))
        y = ReduceFromTP.apply(self.b(h)) + self.bias
        return F.relu(y) if self.last_relu else y


def tp_model(widths, rank, ranks):
    mods, i = [], 0
    n = len(widths) - 1  # connected layers
    while i < n:
        if i + 1 < n and widths[i + 1] % ranks == 0:
            mods.append(TPPair(widths[i], widths[i + 1], widths[i + 2], rank, ranks, i + 2 < n))
            i += 2
        else:
            mods.append(nn.Linear(widths[i], widths[i + 1]))
            if i + 1 < n:
                mods.append(nn.ReLU())
            i += 1
    return nn.Sequential(*mods)


def tp_worker(rank, args, q):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % args.port, rank=rank,
                            world_size=args.nranks)
    torch.manual_seed(1)
    model = tp_model(WIDTHS[args.model], rank, args.nranks)
    ips = timed(args, model, dist.barrier)
    if rank == 0:
        q.put(ips)
    dist.destroy_process_group()


def run_tp(args):
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    procs = [ctx.Process(target=tp_worker, args=(r, args, q)) for r in range(args.nranks)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode:
            sys.exit("torch_mp: a tensor-parallel rank failed (exit %d)" % p.exitcode)
    return q.get()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["one", "pipe", "tp"], required=True)
    p.add_argument("--model", default="balanced", choices=sorted(WIDTHS))
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--chunks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--nranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--port", type=int, default=29631)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ips = {"one": run_one, "pipe": run_pipe, "tp": run_tp}[args.mode](args)
    out = {"images_per_s": ips, "mode": args.mode, "model": args.model, "batch": args.batch}
    if args.mode == "pipe":
        out["chunks"] = args.chunks
    if args.mode != "tp":
        out["threads"] = args.threads
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
