#!/usr/bin/python3
"""torch_dp.py — PyTorch data parallelism on 2 ranks of one host, 1 thread each:
st.DistributedOptimizer (shoal.torch) against DistributedDataParallel over gloo, on
torchvision's ResNet-18 at 32x32 (10 classes) and an MLP shaped as examples/mlp-wide.cfg
(784-3072-2560-10); images/s, medians of REPS interleaved runs, ratios; and the weights after
20 steps of both from the same start on the same data (largest relative difference).

    env -u OPENBLAS_CORETYPE bench/python/torch_dp.py                # REPS=3, 30 timed steps
    bench/python/torch_dp.py --reps 1 --steps 3 --warmup 1 --models mlp   # a quick look

Target (issue 32): st >= 1.5x DDP's images/s on both models, weights within 1e-5 relative.
One rank of a run: --rank MODE (the driver, and bench/python/netlab.sh, start them):
  MODE ddp | ddp-fp16 (DDP with PyTorch's fp16 compression hook) | st | st-onebit | st-fp16 |
  compute (both ranks at once, no communication at all: the plain optimizer) |
  check (both from one start, 20 steps, prints the difference).

The compute-only column bounds every communicator: no data-parallel step is faster than the
same step without communication, so st / ddp can reach at most compute / ddp (the ceiling
column); below 1.5x there, the target is out of reach for any communicator."""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"


def model_of(name):
    import torch
    from torch import nn
    torch.manual_seed(0)
    if name == "resnet18":
        import torchvision
        return torchvision.models.resnet18(num_classes=10), (3, 32, 32)
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 3072), nn.ReLU(), nn.Linear(3072, 2560), nn.ReLU(),
                         nn.Linear(2560, 10)), (1, 28, 28)


def fashion(data, split):
    import numpy as np
    import torch

    def read(name, off):
        path = os.path.join(data, name)
        raw = gzip.open(path + ".gz").read() if os.path.exists(path + ".gz") else open(path, "rb").read()
        return np.frombuffer(raw, dtype=np.uint8, offset=off)
    x = read("%s-images-idx3-ubyte" % split, 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255
    return torch.from_numpy(x), torch.from_numpy(read("%s-labels-idx1-ubyte" % split, 8).astype(np.int64))


def setup(mode, gloo_addr, gloo_port):
    """(rank, world, wrap(model, opt) -> (model, opt))"""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    if mode == "compute":
        return (int(os.environ.get("SHOAL_RANK", "0")), int(os.environ.get("SHOAL_WORLD_SIZE", "1")),
                lambda model, opt: (model, opt))
    if mode.startswith("st"):
        import shoal.torch as st
        st.init()
        comp = {"st": st.Compression.none, "st-onebit": st.Compression.onebit,
                "st-fp16": st.Compression.fp16}[mode]

        def wrap(model, opt):
            st.broadcast_parameters(model.state_dict(), root_rank=0)
            return model, st.DistributedOptimizer(opt, named_parameters=model.named_parameters(), compression=comp)
        return st.rank(), st.size(), wrap
    rank = int(os.environ.get("RANK", os.environ.get("SHOAL_RANK", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("SHOAL_WORLD_SIZE", "1")))
    dist.init_process_group("gloo", init_method="tcp://%s:%s" % (gloo_addr, gloo_port), rank=rank, world_size=world)

    def wrap(model, opt):
        m = DDP(model)
        if mode == "ddp-fp16":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            m.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return m, opt
    return rank, world, wrap


def rank_main(a):
    import torch
    from torch import nn
    torch.set_num_threads(1)
    gloo_addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    gloo_port = os.environ.get("MASTER_PORT") or str(a.gloo_port)
    if a.rank == "check":
        return check_main(a, gloo_addr, gloo_port)
    rank, world, wrap = setup(a.rank, gloo_addr, gloo_port)
    model, shape = model_of(a.model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    model, opt = wrap(model, opt)
    if a.data:
        x, y = fashion(a.data, "train")
        x, y = x[rank::world], y[rank::world]
        steps = int(a.epochs * len(x) / a.batch)
        warmup = 0
    else:
        g = torch.Generator().manual_seed(rank)
        x = torch.randn((a.batch * 4,) + shape, generator=g)
        y = torch.randint(0, 10, (a.batch * 4,), generator=g)
        steps, warmup = a.steps, a.warmup
    loss_fn = nn.CrossEntropyLoss()
    t0 = None
    for s in range(warmup + steps):
        if s == warmup:
            t0 = time.perf_counter()
        i = (s * a.batch) % (len(x) - a.batch + 1)
        opt.zero_grad()
        loss = loss_fn(model(x[i:i + a.batch]), y[i:i + a.batch])
        loss.backward()
        opt.step()
    secs = time.perf_counter() - t0
    out = {"mode": a.rank, "model": a.model, "images_per_s": world * a.batch * steps / secs, "steps": steps,
           "loss": float(loss)}
    if a.data:
        tx, ty = fashion(a.data, "t10k")
        with torch.no_grad():
            out["accuracy"] = float((model(tx).argmax(1) == ty).float().mean())
    if rank == 0:
        print(json.dumps(out), flush=True)
    if a.rank.startswith("ddp"):
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()


def check_main(a, gloo_addr, gloo_port):
    """DDP and st.DistributedOptimizer from one start, 20 steps on the same per-rank data."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    import shoal.torch as st
    st.init()
    dist.init_process_group("gloo", init_method="tcp://%s:%s" % (gloo_addr, gloo_port), rank=st.rank(),
                            world_size=st.size())
    ws = []
    for mode in ("ddp", "st"):
        model, shape = model_of(a.model)
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
        if mode == "ddp":
            model = DDP(model)
        else:
            opt = st.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        for s in range(20):
            g = torch.Generator().manual_seed(100 * s + st.rank())
            x = torch.randn((a.batch,) + shape, generator=g)
            y = torch.randint(0, 10, (a.batch,), generator=g)
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        m = model.module if mode == "ddp" else model
        ws.append([p.detach().clone() for p in m.parameters()])
    rel = max(float((p - q).norm() / q.norm()) for p, q in zip(ws[1], ws[0]))
    if st.rank() == 0:
        print(json.dumps({"model": a.model, "max_relative_difference": rel}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    st.barrier()


def run_rank0(cmd, env):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    for line in p.stdout.splitlines():
        line = line[len("[rank 0] "):] if line.startswith("[rank 0] ") else line
        if line.startswith("{"):
            return json.loads(line)
    sys.exit("torch_dp.py: %s gave no result (exit %d): %s" % (" ".join(cmd[-6:]), p.returncode,
                                                               (p.stderr or p.stdout).strip()[-1200:]))


def coretype():
    """OpenBLAS's kernels for both sides, as bench/peers.sh names them (else DDP's runs, which
    never import shoal, would get what Debian's OpenBLAS guesses on an unknown CPU)."""
    flags = next((l.split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
    if {"avx512f", "avx512bw", "avx512vl"} <= set(flags):
        return "SkylakeX"
    return "Haswell" if {"avx2", "fma"} <= set(flags) else None


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank", help="run as one rank: " + "ddp, ddp-fp16, st, st-onebit, st-fp16, compute, check")
    p.add_argument("--model", default="mlp", choices=["mlp", "resnet18"])
    p.add_argument("--models", default="resnet18,mlp")
    p.add_argument("--modes", default="compute,ddp,st")
    p.add_argument("--reps", type=int, default=int(os.environ.get("REPS", 3)))
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=0, help="per rank (default: 32 for resnet18, 64 for mlp)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--data", default=None, help="train on Fashion-MNIST in DIR (then --epochs, accuracy)")
    p.add_argument("--epochs", type=float, default=2)
    p.add_argument("--gloo-port", type=int, default=0)
    p.add_argument("--shoal", default=os.path.join(ROOT, "build", "shoal"))
    a = p.parse_args()
    if a.rank:
        if not a.batch:
            a.batch = 32 if a.model == "resnet18" else 64
        return rank_main(a)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"), OMP_NUM_THREADS="1", SHOAL_THREADS="1")
    if "OPENBLAS_CORETYPE" not in env and coretype():
        env["OPENBLAS_CORETYPE"] = coretype()
    me = os.path.abspath(__file__)
    results = {}
    for model in a.models.split(","):
        batch = a.batch or (32 if model == "resnet18" else 64)
        common = ["--model", model, "--batch", str(batch), "--steps", str(a.steps), "--warmup", str(a.warmup),
                  "--lr", str(a.lr)]
        for rep in range(a.reps):
            for mode in a.modes.split(","):
                cmd = [a.shoal, "launch", "-n", "2", PY, me, "--rank", mode, "--gloo-port", str(free_port())] + common
                results.setdefault((model, mode), []).append(run_rank0(cmd, env)["images_per_s"])
            print("%s: rep %d of %d done" % (model, rep + 1, a.reps), file=sys.stderr, flush=True)
        chk = run_rank0([a.shoal, "launch", "-n", "2", PY, me, "--rank", "check", "--gloo-port", str(free_port())]
                        + common, env)
        results[(model, "check")] = chk["max_relative_difference"]
    modes = a.modes.split(",")
    print("PyTorch data parallel, 2 ranks x 1 thread on one host; images/s, medians of %d runs" % a.reps)
    print("| model | batch/rank | " + " | ".join(modes) +
          " | st / ddp | ceiling: compute / ddp | weights after 20 steps (max rel. diff) |")
    print("|---|---:|" + "---:|" * len(modes) + "---:|---:|---:|")
    nan = float("nan")
    for model in a.models.split(","):
        med = {m: statistics.median(results[(model, m)]) for m in modes}
        ddp = med.get("ddp", nan)
        print("| %s | %d | %s | %.2fx | %.2fx | %.2g |" % (
            model, a.batch or (32 if model == "resnet18" else 64), " | ".join("%.1f" % med[m] for m in modes),
            med.get("st", nan) / ddp, med.get("compute", nan) / ddp, results[(model, "check")]))
    if "compute" in modes and "ddp" in modes:
        print("ceiling: the step without any communication (both ranks running at once); no communicator "
              "can beat it, so st / ddp <= compute / ddp.")
        for model in a.models.split(","):
            batch = a.batch or (32 if model == "resnet18" else 64)
            step = {m: 2 * batch / statistics.median(results[(model, m)]) * 1e3 for m in ("compute", "ddp")}
            ceil = step["ddp"] / step["compute"]
            print("%s: DDP's step %.1f ms, compute-only %.1f ms: ceiling %.2fx, %s" % (
                model, step["ddp"], step["compute"], ceil, "the 1.5x target is out of reach for any communicator"
                if ceil < 1.5 else "1.5x is within reach"))


if __name__ == "__main__":
    main()
