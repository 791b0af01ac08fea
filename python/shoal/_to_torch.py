"""shoal.to_torch(cfg, weights) — a torch.nn.Module computing what shoal's net of that cfg
computes, with its weights: [convolutional] (groups, batch norm), [connected], [maxpool] (Darknet's
padding), [avgpool], [dropout], [route], [shortcut] (Darknet's rule for different shapes),
[softmax] (groups, temperature), [cost], [lstm], [gru] (both forms) and [rnn] (Darknet's
equations), so a model trained in shoal continues in PyTorch. Recurrent layers carry their
state from one forward to the next as shoal does (reset_state() zeroes it).
Not here: the layers' semantics themselves (src/nn/layer_*.c, docs/cfg.md).
Proved by tests/python/test_to_torch.py (LeNet, a residual net, the char models: forward equal
to shoal's within 1e-4)."""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ._engine import Net

ACT = {
    "linear": lambda x: x,
    "relu": torch.relu,
    "leaky": lambda x: F.leaky_relu(x, 0.1),
    "logistic": torch.sigmoid,
    "tanh": torch.tanh,
    "ramp": lambda x: torch.where(x > 0, 1.1 * x, 0.1 * x),
}


def _t(a):
    return torch.from_numpy(np.array(a, dtype=np.float32))


def _act(name):
    if name not in ACT:
        raise NotImplementedError("activation %s has no PyTorch form here" % name)
    return ACT[name]


class _Conv(nn.Module):
    def __init__(self, l, P, S):
        super().__init__()
        c_in = l["in"][0]
        bn = l["batch_normalize"]
        self.conv = nn.Conv2d(c_in, l["filters"], l["size"], l["stride"], l["pad"], groups=l["groups"], bias=not bn)
        self.bn = nn.BatchNorm2d(l["filters"], eps=1e-5, momentum=0.01) if bn else None
        self.act = l["activation"]
        _act(self.act)
        _load_affine(self, l, P, S)

    def forward(self, x):
        y = self.conv(x)
        if self.bn is not None:
            y = self.bn(y)
        return _act(self.act)(y)


class _Dense(nn.Module):
    def __init__(self, l, P, S):
        super().__init__()
        c, h, w = l["in"]
        k = l["out"][0]
        bn = l["batch_normalize"]
        self.fc = nn.Linear(c * h * w, k, bias=not bn)
        self.bn = nn.BatchNorm1d(k, eps=1e-5, momentum=0.01) if bn else None
        self.act = l["activation"]
        _act(self.act)
        _load_affine(self, l, P, S)

    def forward(self, x):
        y = self.fc(x.reshape(x.shape[0], -1))
        if self.bn is not None:
            y = self.bn(y)
        return _act(self.act)(y).reshape(x.shape[0], -1, 1, 1)


def _load_affine(m, l, P, S):
    """Weights, biases (the batch norm's shift when there is one), scales and statistics."""
    lin = m.conv if hasattr(m, "conv") else m.fc
    with torch.no_grad():
        off, n = l["weights"]
        lin.weight.copy_(_t(P[off:off + n]).reshape(lin.weight.shape))
        off, n = l["biases"]
        (m.bn.bias if m.bn is not None else lin.bias).copy_(_t(P[off:off + n]))
        if m.bn is not None:
            off, n = l["scales"]
            m.bn.weight.copy_(_t(P[off:off + n]))
            off, n = l["stats"]
            m.bn.running_mean.copy_(_t(S[off:off + n // 2]))
            m.bn.running_var.copy_(_t(S[off + n // 2:off + n]))


class _MaxPool(nn.Module):
    """Darknet's: the input padded by `pad` in total, pad // 2 before, windows over it;
    padded positions never win."""

    def __init__(self, l):
        super().__init__()
        self.size, self.stride, self.pad = l["size"], l["stride"], l["pad"]

    def forward(self, x):
        lo = self.pad // 2
        hi = self.pad - lo
        if self.pad:
            x = F.pad(x, (lo, hi, lo, hi), value=-math.inf)
        return F.max_pool2d(x, self.size, self.stride)


class _AvgPool(nn.Module):
    def forward(self, x):
        return x.mean(dim=(2, 3), keepdim=True)


class _Softmax(nn.Module):
    def __init__(self, l, groups):
        super().__init__()
        self.t, self.groups = l["temperature"] or 1.0, groups

    def forward(self, x):
        n = x.shape[0]
        y = x.reshape(n, self.groups, -1) / self.t
        return torch.softmax(y, dim=2).reshape(x.shape)


class _Identity(nn.Module):
    def forward(self, x):
        return x


class _Dropout(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return self.drop(x)


def _gate_rows(h, ng):
    """Row of PyTorch's fused gate matrix (gate q, unit j at q*h + j) -> shoal's row, whose
    gates sit side by side in blocks of 16 units (src/nn/recurrent.h: sh_rnn_gate_col)."""
    rows = np.empty(ng * h, dtype=np.int64)
    for q in range(ng):
        for j in range(h):
            blk = j // 16
            width = min(16, h - blk * 16)
            rows[q * h + j] = blk * 16 * ng + q * width + j % 16
    return rows


class _Recurrent(nn.Module):
    """Rows of a batch are (time step, stream), time-major; the state of every stream is kept
    from one forward to the next."""

    def __init__(self, l):
        super().__init__()
        self.steps, self.hidden = l["steps"], l["hidden"]
        self.state = None

    def reset_state(self):
        self.state = None

    def _seq(self, x):
        rows = x.shape[0]
        if rows % self.steps:
            raise ValueError("%d rows are not whole sequences of %d steps" % (rows, self.steps))
        return x.reshape(self.steps, rows // self.steps, -1)


class _Gated(_Recurrent):
    """[lstm] and [gru] (form=pytorch): nn.LSTM and nn.GRU with shoal's weights."""

    def __init__(self, l, P):
        super().__init__(l)
        h, i = l["hidden"], l["in"][0] * l["in"][1] * l["in"][2]
        ng = 4 if l["type"] == "lstm" else 3
        self.rnn = (nn.LSTM if l["type"] == "lstm" else nn.GRU)(i, h)
        rows = _gate_rows(h, ng)
        off, n = l["weights"]
        w = P[off:off + n]
        wx, wh = w[:ng * h * i].reshape(ng * h, i), w[ng * h * i:].reshape(ng * h, h)
        off, n = l["biases"]
        b = P[off:off + n]
        with torch.no_grad():
            self.rnn.weight_ih_l0.copy_(_t(wx[rows]))
            self.rnn.weight_hh_l0.copy_(_t(wh[rows]))
            self.rnn.bias_ih_l0.copy_(_t(b[:ng * h][rows]))
            self.rnn.bias_hh_l0.copy_(_t(b[ng * h:][rows]))

    def forward(self, x):
        seq = self._seq(x.reshape(x.shape[0], -1))
        y, self.state = self.rnn(seq, self.state)
        self.state = tuple(s.detach() for s in self.state) if isinstance(self.state, tuple) else self.state.detach()
        return y.reshape(x.shape[0], -1, 1, 1)


class _GruDarknet(_Recurrent):
    """[gru] form=darknet (src/nn/layer_gru_darknet.c): the reset gate multiplies h before the
    candidate's state product; gate-major weights [r; z; n]."""

    def __init__(self, l, P):
        super().__init__(l)
        h, i = l["hidden"], l["in"][0] * l["in"][1] * l["in"][2]
        off, n = l["weights"]
        w = P[off:off + n]
        self.wx = nn.Parameter(_t(w[:3 * h * i]).reshape(3 * h, i))
        self.wh = nn.Parameter(_t(w[3 * h * i:]).reshape(3 * h, h))
        off, n = l["biases"]
        self.bx = nn.Parameter(_t(P[off:off + 3 * h]))
        self.bh = nn.Parameter(_t(P[off + 3 * h:off + 6 * h]))
        self.cand = _act(l["activation"] or "logistic")

    def forward(self, x):
        seq = self._seq(x.reshape(x.shape[0], -1))
        h = self.hidden
        s = self.state if self.state is not None else seq.new_zeros(seq.shape[1], h)
        outs = []
        for t in range(seq.shape[0]):
            ax = seq[t] @ self.wx.T + self.bx
            ah = s @ self.wh[:2 * h].T + self.bh[:2 * h]
            r = torch.sigmoid(ax[:, :h] + ah[:, :h])
            z = torch.sigmoid(ax[:, h:2 * h] + ah[:, h:])
            n = self.cand(ax[:, 2 * h:] + (r * s) @ self.wh[2 * h:].T + self.bh[2 * h:])
            s = z * s + (1 - z) * n
            outs.append(s)
        self.state = s.detach()
        return torch.stack(outs).reshape(x.shape[0], -1, 1, 1)


class _Rnn(_Recurrent):
    """[rnn]: Darknet's three connected sublayers, s' = act(Win x + bin) + act(Wself s + bself),
    y = act(Wout s' + bout)."""

    def __init__(self, l, P):
        super().__init__(l)
        if l["batch_normalize"]:
            raise NotImplementedError("[rnn] with batch_normalize=1 has no PyTorch form here")
        h, i, k = l["hidden"], l["in"][0] * l["in"][1] * l["in"][2], l["out"][0]
        off, _ = l["weights"]
        w = P[off:]
        self.w_in = nn.Parameter(_t(w[:h * i]).reshape(h, i))
        self.w_self = nn.Parameter(_t(w[h * i:h * i + h * h]).reshape(h, h))
        self.w_out = nn.Parameter(_t(w[h * i + h * h:h * i + h * h + k * h]).reshape(k, h))
        off, _ = l["biases"]
        b = P[off:]
        self.b_in, self.b_self, self.b_out = (nn.Parameter(_t(b[:h])), nn.Parameter(_t(b[h:2 * h])),
                                              nn.Parameter(_t(b[2 * h:2 * h + k])))
        self.act = _act(l["activation"])

    def forward(self, x):
        seq = self._seq(x.reshape(x.shape[0], -1))
        s = self.state if self.state is not None else seq.new_zeros(seq.shape[1], self.hidden)
        outs = []
        for t in range(seq.shape[0]):
            s = self.act(seq[t] @ self.w_in.T + self.b_in) + self.act(s @ self.w_self.T + self.b_self)
            outs.append(self.act(s @ self.w_out.T + self.b_out))
        self.state = s.detach()
        return torch.stack(outs).reshape(x.shape[0], -1, 1, 1)


class _Shortcut(nn.Module):
    """The previous layer plus layer `from`; shapes may differ as Darknet allows: over the
    smaller channel count, out pixel (j*sample, i*sample) gets from pixel (j*stride, i*stride)."""

    def __init__(self, l, from_shape):
        super().__init__()
        self.act = _act(l["activation"])
        c, h, w = l["out"]
        fc, fh, fw = from_shape
        self.same = (c, h, w) == tuple(from_shape)
        stride, sample = max(1, fw // w), max(1, w // fw)
        minc, minh, minw = min(c, fc), min(h, fh), min(w, fw)
        self.minc = minc
        self.register_buffer("oh", torch.arange(minh) * sample, persistent=False)
        self.register_buffer("ow", torch.arange(minw) * sample, persistent=False)
        self.register_buffer("fh", torch.arange(minh) * stride, persistent=False)
        self.register_buffer("fw", torch.arange(minw) * stride, persistent=False)

    def forward(self, a, b):
        if self.same:
            return self.act(a + b)
        out = a.clone()
        part = b[:, :self.minc][:, :, self.fh][:, :, :, self.fw]
        idx = (slice(None), slice(0, self.minc), self.oh[:, None], self.ow[None, :])
        out[idx] = out[idx] + part
        return self.act(out)


class ShoalModel(nn.Module):
    """The layers of a shoal .cfg as torch modules, run in order; route and shortcut read
    earlier layers' outputs. forward(x): x (N, C, H, W) or (N, C*H*W) (recurrent nets: N rows,
    time-major) -> (N, K), shoal's output."""

    def __init__(self, net):
        super().__init__()
        P = net.params_block()
        S = np.asarray(net._net.block("stats"))
        self.input_shape = net.input_shape
        self.srcs = []
        mods = []
        for i, l in enumerate(net.layers):
            t = l["type"]
            src = list(l["src"])
            if t == "convolutional":
                m = _Conv(l, P, S)
            elif t == "connected":
                m = _Dense(l, P, S)
            elif t == "maxpool":
                m = _MaxPool(l)
            elif t == "avgpool":
                m = _AvgPool()
            elif t == "dropout":
                m = _Dropout(l["probability"])
            elif t == "softmax" and not l["groups"]:
                m = _Softmax(l, 1)
            elif t == "cost":
                m = _Identity()
            elif t == "route":
                m = _Identity()
            elif t == "shortcut":
                m = _Shortcut(l, net.layers[src[1]]["out"])
            elif t == "lstm" or (t == "gru" and l["form"] != "darknet"):
                m = _Gated(l, P)
            elif t == "gru":
                m = _GruDarknet(l, P)
            elif t == "rnn":
                m = _Rnn(l, P)
            else:
                raise NotImplementedError("to_torch: layer %d ([%s], %s line %d) has no PyTorch form; it "
                                          "takes convolutional, connected, maxpool, avgpool, dropout, route, "
                                          "shortcut, softmax, cost, lstm, gru and rnn" % (i, t, net.cfg, l["line"]))
            mods.append(m)
            self.srcs.append(src)
        self.layers = nn.ModuleList(mods)
        self.types = [l["type"] for l in net.layers]

    def reset_state(self):
        for m in self.layers:
            if isinstance(m, _Recurrent):
                m.reset_state()

    def forward(self, x):
        n = x.shape[0]
        x = x.reshape(n, *self.input_shape)
        outs = []
        for m, t, src in zip(self.layers, self.types, self.srcs):
            ins = [x if s < 0 else outs[s] for s in src]
            if t == "route":
                y = torch.cat(ins, dim=1)
            elif t == "shortcut":
                y = m(ins[0], ins[1])
            else:
                y = m(ins[0])
            outs.append(y)
        return outs[-1].reshape(n, -1)


def to_torch(cfg, weights=None, batch=1):
    """to_torch(cfg, weights=None) -> torch.nn.Module (in eval mode) computing what shoal's net
    of cfg computes with those weights: weights is a shoal checkpoint or Darknet .weights path,
    a shoal.Net (its current weights), or None (the cfg's initial weights, seed 1). batch: the
    streams a recurrent net's state is kept for (any N for feed-forward nets)."""
    if isinstance(weights, Net):
        net = weights
    else:
        net = Net(cfg, batch=batch)
        if weights is not None:
            net.load(weights)
    return ShoalModel(net).eval()
