"""to_torch.py — a model trained by shoal continues in PyTorch: shoal.train writes a
checkpoint, shoal.to_torch builds the same network as a torch.nn.Module with those weights,
its outputs equal shoal's, and PyTorch trains it on.

    python3 examples/python/to_torch.py
"""
import os
import sys
import tempfile

import numpy as np
import torch

import shoal

cfg = os.path.join(os.path.dirname(__file__), os.pardir, "lenet.cfg")
data = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SHOAL_DATA_DIR", "/usr/share/datasets/fashion-mnist")
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
ckpt = os.path.join(tempfile.mkdtemp(), "lenet.ckpt")

report = shoal.train(cfg, data=data, max_steps=steps, save=ckpt, quiet=True)
print("shoal: %d steps, test accuracy %.2f%%" % (report["steps"], 100 * report["accuracy"]))

model = shoal.to_torch(cfg, ckpt)                        # torch.nn.Module, eval mode
net = shoal.Net(cfg, batch=16)
net.load(ckpt)
x = np.random.default_rng(0).random((16, 1, 28, 28), dtype=np.float32)
with torch.no_grad():
    diff = np.abs(model(torch.from_numpy(x)).numpy() - net.forward(x)).max()
print("largest difference between PyTorch's and shoal's outputs: %.2g" % diff)

model.train()                                            # and on it goes, in PyTorch
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(5):
    opt.zero_grad()
    probs = model(torch.from_numpy(x))                   # the net ends with [softmax]
    loss = torch.nn.functional.nll_loss(torch.log(probs), torch.zeros(16, dtype=torch.long))
    loss.backward()
    opt.step()
print("PyTorch went on: loss %.4f" % loss.item())
