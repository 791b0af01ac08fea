# lrn_torch.py — the reference for tests/nn/test_layer_lrn.c: PyTorch's LocalResponseNorm in
# double on the test's input, then softmax cross-entropy over the flattened output (shoal's
# [softmax] loss, mean over images); writes the output and the input's gradient as float32.
# usage: lrn_torch.py IN OUT N C H W SIZE ALPHA BETA KAPPA  (ALPHA is Darknet's: per value)
import sys

import numpy as np
import torch

inp, out = sys.argv[1], sys.argv[2]
n, c, h, w, size = (int(v) for v in sys.argv[3:8])
alpha, beta, kappa = (float(v) for v in sys.argv[8:11])
raw = np.fromfile(inp, dtype=np.uint8)
x = np.frombuffer(raw[: n * c * h * w * 4].tobytes(), dtype=np.float32).reshape(n, c, h, w)
labels = np.frombuffer(raw[n * c * h * w * 4:].tobytes(), dtype=np.int32)
xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
# PyTorch divides alpha by size; Darknet's alpha multiplies each squared value.
lrn = torch.nn.LocalResponseNorm(size, alpha=alpha * size, beta=beta, k=kappa)
y = lrn(xt)
loss = torch.nn.functional.cross_entropy(y.reshape(n, -1), torch.tensor(labels, dtype=torch.long))
loss.backward()
np.concatenate([y.detach().numpy().ravel(), xt.grad.numpy().ravel()]).astype(np.float32).tofile(out)
