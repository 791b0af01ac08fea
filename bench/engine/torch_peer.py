#!/usr/bin/python3
"""torch_peer.py - the PyTorch side of bench/engine/run.sh: the same models as
examples/lenet.cfg, examples/mlp.cfg and examples/resnet18.cfg written by hand (no
torchvision), trained or timed the way shoal does it, printing one JSON object.

  train: SGD lr 0.01 momentum 0.9 weight decay 5e-4, batch 64, Fashion-MNIST kept as bytes
         and scaled per batch (as shoal does); images/s over `steps` after `warmup` steps.
  time:  forward and backward milliseconds per iteration on random input (as shoal time).
"""
import argparse
import gzip
import json
import os
import resource
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def lenet():
    # Caffe's LeNet: convolutions without activation, ReLU only after the first dense layer.
    return nn.Sequential(
        nn.Conv2d(1, 20, 5), nn.MaxPool2d(2, 2),
        nn.Conv2d(20, 50, 5), nn.MaxPool2d(2, 2),
        nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10))


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(),
                         nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (self.proj(x) if self.proj is not None else x))


def resnet18(nclasses=1000):
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, nclasses)]
    return nn.Sequential(*layers)


def load_idx_images(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    magic, n, h, w = struct.unpack(">IIII", data[:16])
    assert magic == 0x803, path
    return torch.frombuffer(bytearray(data[16:]), dtype=torch.uint8).view(n, 1, h, w)


def load_idx_labels(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    assert magic == 0x801, path
    return torch.frombuffer(bytearray(data[8:]), dtype=torch.uint8).long()


def find(ddir, stem):
    for name in (stem + ".gz", stem):
        if os.path.exists(os.path.join(ddir, name)):
            return os.path.join(ddir, name)
    sys.exit("torch_peer: no %s in %s" % (stem, ddir))


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def train(args):
    images = load_idx_images(find(args.data, "train-images-idx3-ubyte"))
    labels = load_idx_labels(find(args.data, "train-labels-idx1-ubyte"))
    model = {"lenet": lenet, "mlp": mlp}[args.model]()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    g = torch.Generator().manual_seed(1)
    order = torch.randperm(images.shape[0], generator=g)
    b = args.batch
    steps_per_epoch = images.shape[0] // b
    start = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            start = time.perf_counter()
        k = step % steps_per_epoch
        idx = order[k * b:(k + 1) * b]
        x = images[idx].float().div_(255.0)
        y = labels[idx]
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    secs = time.perf_counter() - start
    return {"images_per_s": args.steps * b / secs, "loss": float(loss),
            "peak_rss_mb": peak_rss_mb(), "threads": torch.get_num_threads()}


def time_model(args):
    model = {"lenet": lenet, "mlp": mlp, "resnet18": resnet18}[args.model]()
    model.train()
    shape = (args.batch, 3, 224, 224) if args.model == "resnet18" else (args.batch, 1, 28, 28)
    nclasses = 1000 if args.model == "resnet18" else 10
    x = torch.rand(shape)
    y = torch.randint(0, nclasses, (args.batch,))
    fwd = bwd = 0.0
    for it in range(args.warmup + args.steps):
        model.zero_grad(set_to_none=False)
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        if it >= args.warmup:
            fwd += t1 - t0
            bwd += t2 - t1
    n = args.steps
    return {"forward_ms": 1e3 * fwd / n, "backward_ms": 1e3 * bwd / n,
            "total_ms": 1e3 * (fwd + bwd) / n, "peak_rss_mb": peak_rss_mb(),
            "threads": torch.get_num_threads()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["train", "time"])
    p.add_argument("--model", default="lenet", choices=["lenet", "mlp", "resnet18"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    out = train(args) if args.mode == "train" else time_model(args)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
