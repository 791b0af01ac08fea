#!/usr/bin/python3
"""unlabelled_ref.py KIND IN OUT [KIND IN OUT ...] — the reference half of tests/nn/test_layer_deconv.c,
test_layer_upsample.c, test_layer_local.c, test_cost.c and test_layer_rbm.c.

IN holds int32 header words then float32 arrays (see each reader below); OUT gets float32 results.
  deconv:   [N C H W F S stride pad] x t W(C,F,S,S) b(F) -> y, loss, dW, db, dx   (ConvTranspose2d)
  upsample: [N C H W stride] scale x t                  -> y, loss, dx             (nn.Upsample)
  local:    [N C H W F S stride pad] x t W(L,F,CSS) b(F,OH,OW) -> y, loss, dW, db, dx (unfold)
  cost:     [count N kind] scale y t                    -> loss, dy   (MSE/2, L1, SmoothL1 sums)
  rbm:      [rows I K] W(K,I) b(K) c(I) v(rows,I) flip(rows, as floats) h(rows,K)
            -> mean hiddens, mean visibles, free energies, pseudo-likelihoods (scikit-learn)
Every regression loss is a mean over the N images of a sum over outputs, as shoal's; the
networks' arithmetic runs in double, so differences are shoal's."""
import struct
import sys

import numpy as np


def read(path):
    raw = open(path, "rb").read()
    return raw


def header(raw, n):
    return struct.unpack_from("%di" % n, raw, 0), np.frombuffer(raw, dtype=np.float32, offset=4 * n).astype(np.float64)


class Cursor:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, *shape):
        n = int(np.prod(shape))
        a = self.data[self.pos:self.pos + n].reshape(shape)
        self.pos += n
        return a


def sse(y, t, n):
    return 0.5 * ((y - t) ** 2).sum() / n


def write(path, *arrays):
    with open(path, "wb") as f:
        for a in arrays:
            f.write(np.asarray(a, dtype=np.float32).ravel().tobytes())


def deconv(raw, dst):
    import torch
    (n, c, h, w, f, s, stride, pad), data = header(raw, 8)
    cur = Cursor(data)
    x = torch.tensor(cur.take(n, c, h, w), requires_grad=True)
    oh, ow = (h - 1) * stride + s - 2 * pad, (w - 1) * stride + s - 2 * pad
    t = torch.tensor(cur.take(n, f, oh, ow))
    wt = torch.tensor(cur.take(c, f, s, s), requires_grad=True)
    b = torch.tensor(cur.take(f), requires_grad=True)
    y = torch.nn.functional.conv_transpose2d(x, wt, b, stride=stride, padding=pad)
    loss = sse(y, t, n)
    loss.backward()
    write(dst, y.detach(), [loss.item()], wt.grad, b.grad, x.grad)


def upsample(raw, dst):
    import torch
    (n, c, h, w, stride), data = header(raw, 5)
    cur = Cursor(data)
    scale = cur.take(1)[0]
    x = torch.tensor(cur.take(n, c, h, w), requires_grad=True)
    if stride > 0:
        y = scale * torch.nn.Upsample(scale_factor=stride, mode="nearest")(x)
    else:  # Darknet's reverse form: each block summed
        s = -stride
        y = scale * torch.nn.functional.avg_pool2d(x, s) * (s * s)
    t = torch.tensor(cur.take(*y.shape))
    loss = sse(y, t, n)
    loss.backward()
    write(dst, y.detach(), [loss.item()], x.grad)


def local(raw, dst):
    import torch
    (n, c, h, w, f, s, stride, pad), data = header(raw, 8)
    cur = Cursor(data)
    x = torch.tensor(cur.take(n, c, h, w), requires_grad=True)
    oh = ((h - 1) if pad else (h - s)) // stride + 1
    ow = ((w - 1) if pad else (w - s)) // stride + 1
    loc, css = oh * ow, c * s * s
    t = torch.tensor(cur.take(n, f, oh, ow))
    wt = torch.tensor(cur.take(loc, f, css), requires_grad=True)
    b = torch.tensor(cur.take(f, oh, ow), requires_grad=True)
    cols = torch.nn.functional.unfold(x, s, padding=pad, stride=stride)  # (n, css, loc)
    y = torch.einsum("jfk,nkj->nfj", wt, cols).reshape(n, f, oh, ow) + b
    loss = sse(y, t, n)
    loss.backward()
    write(dst, y.detach(), [loss.item()], wt.grad, b.grad, x.grad)


def cost(raw, dst):
    import torch
    (count, n, kind), data = header(raw, 3)
    cur = Cursor(data)
    scale = cur.take(1)[0]
    y = torch.tensor(cur.take(count), requires_grad=True)
    t = torch.tensor(cur.take(count))
    if kind == 1:
        loss = 0.5 * torch.nn.functional.mse_loss(y, t, reduction="sum")
    elif kind == 2:
        loss = torch.nn.functional.l1_loss(y, t, reduction="sum")
    else:
        loss = torch.nn.functional.smooth_l1_loss(y, t, reduction="sum", beta=1.0)
    loss = scale * loss / n
    loss.backward()
    write(dst, [loss.item()], y.grad)


def rbm(raw, dst):
    from sklearn.neural_network import BernoulliRBM
    (rows, inputs, k), data = header(raw, 3)
    cur = Cursor(data)
    r = BernoulliRBM(n_components=k)
    r.components_ = cur.take(k, inputs)
    r.intercept_hidden_ = cur.take(k)
    r.intercept_visible_ = cur.take(inputs)
    v = cur.take(rows, inputs)
    flip = cur.take(rows).astype(np.int64)
    h = cur.take(rows, k)
    # score_samples' own formula, with the flipped units given rather than drawn
    v_ = v.copy()
    v_[np.arange(rows), flip] = 1 - v_[np.arange(rows), flip]
    fe, fe_ = r._free_energy(v), r._free_energy(v_)
    from sklearn.utils.extmath import log_logistic
    pl = inputs * log_logistic(fe_ - fe)
    # _sample_visibles' probabilities, before it draws
    vm = 1 / (1 + np.exp(-(h @ r.components_ + r.intercept_visible_)))
    write(dst, r._mean_hiddens(v), vm, fe, pl)


if __name__ == "__main__":
    # KIND SRC DST, once or more: one process imports torch once for a test's cases
    for i in range(1, len(sys.argv) - 2, 3):
        kind, src, dst = sys.argv[i:i + 3]
        {"deconv": deconv, "upsample": upsample, "local": local, "cost": cost, "rbm": rbm}[kind](read(src), dst)
