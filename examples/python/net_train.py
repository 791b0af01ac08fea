"""net_train.py — shoal's own engine from Python: LeNet built from examples/lenet.cfg, trained
by a loop written here on numpy views of shoal's memory, data parallel over the ranks by one
allreduce of the gradient block a step.

    python3 examples/python/net_train.py --steps 300
    shoal launch -n 2 python3 examples/python/net_train.py
"""
import argparse
import gzip
import os

import shoal        # before numpy: it picks OpenBLAS's kernels for this CPU before numpy opens it
import numpy as np  # noqa: E402


def load(data, split):
    def read(name, offset):
        path = os.path.join(data, name)
        raw = gzip.open(path + ".gz").read() if os.path.exists(path + ".gz") else open(path, "rb").read()
        return np.frombuffer(raw, dtype=np.uint8, offset=offset)
    x = read("%s-images-idx3-ubyte" % split, 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255
    return x, read("%s-labels-idx1-ubyte" % split, 8).astype(np.int32)


p = argparse.ArgumentParser()
p.add_argument("--data", default=os.environ.get("SHOAL_DATA_DIR", "/usr/share/datasets/fashion-mnist"))
p.add_argument("--cfg", default=os.path.join(os.path.dirname(__file__), os.pardir, "lenet.cfg"))
p.add_argument("--steps", type=int, default=500)
p.add_argument("--save", default=None, help="write the weights here at the end (.weights: Darknet's)")
args = p.parse_args()

comm = shoal.init()
net = shoal.Net(args.cfg, batch=64, seed=1)
x, y = load(args.data, "train")
x, y = x[comm.rank::comm.size], y[comm.rank::comm.size]
params, grads, block = net.parameters(), net.gradients(), net.grads_block()
velocity = {k: np.zeros_like(v) for k, v in params.items()}
for step in range(args.steps):
    i = (step * 64) % (len(x) - 64)
    net.forward(x[i:i + 64], training=True)
    loss = net.backward(y[i:i + 64])
    comm.allreduce(block, op="avg")                   # every gradient at once, in place
    for k, p in params.items():                       # SGD with momentum, in shoal's memory
        velocity[k] = 0.9 * velocity[k] - 0.01 * grads[k]
        p += velocity[k]
    if step % 100 == 0 and comm.rank == 0:
        print("step %d loss %.4f" % (step, loss), flush=True)

tx, ty = load(args.data, "t10k")
n = len(tx) - len(tx) % 64
hits = sum(int((net.forward(tx[i:i + 64]).argmax(1) == ty[i:i + 64]).sum()) for i in range(0, n, 64))
if comm.rank == 0:
    print("test accuracy %.2f%% after %d steps on %d ranks" % (100.0 * hits / n, args.steps, comm.size))
    if args.save:
        net.save(args.save)
