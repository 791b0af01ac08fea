"""horovod_train.py — a Horovod PyTorch script ported by changing its import: an MLP on
Fashion-MNIST, gradients averaged by st.DistributedOptimizer while backward runs.

    shoal launch -n 2 python3 examples/python/horovod_train.py --epochs 1
    shoal launch -n 2 python3 examples/python/horovod_train.py --compression onebit
"""
import argparse
import gzip
import os

import numpy as np
import torch
from torch import nn

import shoal.torch as st        # was: import horovod.torch as hvd


def load(data, split):
    """Fashion-MNIST's IDX files (gzipped or not) as float tensors in [0, 1] and labels."""
    def read(name, offset):
        path = os.path.join(data, name)
        raw = gzip.open(path + ".gz").read() if os.path.exists(path + ".gz") else open(path, "rb").read()
        return np.frombuffer(raw, dtype=np.uint8, offset=offset)
    x = read("%s-images-idx3-ubyte" % split, 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255
    y = read("%s-labels-idx1-ubyte" % split, 8).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


p = argparse.ArgumentParser()
p.add_argument("--data", default=os.environ.get("SHOAL_DATA_DIR", "/usr/share/datasets/fashion-mnist"))
p.add_argument("--epochs", type=float, default=1)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--compression", default="none", help="none, fp16, bf16, onebit or topk")
args = p.parse_args()

st.init()
torch.set_num_threads(1)
torch.manual_seed(1)
x, y = load(args.data, "train")
tx, ty = load(args.data, "t10k")
x, y = x[st.rank()::st.size()], y[st.rank()::st.size()]          # this rank's shard

model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                      nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05 * st.size(), momentum=0.9)
comp = st.Compression.topk(0.01) if args.compression == "topk" else getattr(st.Compression, args.compression)
opt = st.DistributedOptimizer(opt, named_parameters=model.named_parameters(), compression=comp)
st.broadcast_parameters(model.state_dict(), root_rank=0)
st.broadcast_optimizer_state(opt, root_rank=0)

steps = int(args.epochs * len(x) / args.batch)
for step in range(steps):
    i = (step * args.batch) % (len(x) - args.batch)
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x[i:i + args.batch]), y[i:i + args.batch])
    loss.backward()
    opt.step()
    if step % 200 == 0 and st.rank() == 0:
        print("step %d loss %.4f" % (step, loss.item()), flush=True)

with torch.no_grad():
    correct = (model(tx).argmax(1) == ty).float().mean()
acc = st.allreduce(correct)                                       # the ranks agree anyway
if st.rank() == 0:
    print("after %d steps on %d ranks: test accuracy %.2f%%" % (steps, st.size(), 100 * acc.item()))
