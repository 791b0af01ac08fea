#!/usr/bin/python3
"""rnn_torch.py IN OUT [IN OUT ...] — the reference half of tests/nn/test_rnn_torch.c: reads a recurrent
layer's weights (PyTorch's layout), a batch, its labels and starting state from IN, runs
torch.nn.LSTM / nn.GRU (or Darknet's [rnn] equations written with torch ops: nn.RNN cannot
express them) followed by softmax cross-entropy, and writes the loss, the softmax output, the
final state and every gradient to OUT, all float32."""
import struct
import sys

import numpy as np
import torch

torch.set_default_dtype(torch.float64)  # the reference in double: differences are shoal's


def main(src, dst):
    raw = open(src, "rb").read()
    kind, inp, hid, out, steps, streams = struct.unpack_from("6i", raw, 0)
    data = np.frombuffer(raw, dtype=np.float32, offset=24).astype(np.float64)
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        t = torch.tensor(data[pos:pos + n].reshape(shape), requires_grad=True)
        pos += n
        return t

    x = take(steps, streams, inp)
    labels = torch.tensor(data[pos:pos + steps * streams], dtype=torch.int64)
    pos += steps * streams
    if kind in (0, 1):
        ng = 4 if kind == 0 else 3
        mod = (torch.nn.LSTM if kind == 0 else torch.nn.GRU)(inp, hid)
        w_ih, w_hh = take(ng * hid, inp), take(ng * hid, hid)
        b_ih, b_hh = take(ng * hid), take(ng * hid)
        with torch.no_grad():
            mod.weight_ih_l0.copy_(w_ih)
            mod.weight_hh_l0.copy_(w_hh)
            mod.bias_ih_l0.copy_(b_ih)
            mod.bias_hh_l0.copy_(b_hh)
        h0 = take(1, streams, hid)
        if kind == 0:
            c0 = take(1, streams, hid)
            y, (hn, cn) = mod(x, (h0, c0))
            final = [hn, cn]
        else:
            y, hn = mod(x, h0)
            final = [hn]
        params = [mod.weight_ih_l0, mod.weight_hh_l0, mod.bias_ih_l0, mod.bias_hh_l0]
        logits = y
    else:  # Darknet's [rnn] with activation tanh
        w_in, w_self, w_out = take(hid, inp), take(hid, hid), take(out, hid)
        b_in, b_self, b_out = take(hid), take(hid), take(out)
        s = take(streams, hid)
        outs = []
        for t in range(steps):
            s = torch.tanh(x[t] @ w_in.T + b_in) + torch.tanh(s @ w_self.T + b_self)
            outs.append(torch.tanh(s @ w_out.T + b_out))
        logits = torch.stack(outs)
        final = [s]
        params = [w_in, w_self, w_out, b_in, b_self, b_out]
    flat = logits.reshape(steps * streams, -1)
    loss = torch.nn.functional.cross_entropy(flat, labels)
    loss.backward()
    res = [loss.detach().reshape(1), torch.softmax(flat, 1).detach()]
    res += [f.detach() for f in final]
    res += [p.grad for p in params]
    res.append(x.grad)
    np.concatenate([r.numpy().ravel() for r in res]).astype(np.float32).tofile(dst)


if __name__ == "__main__":
    for i in range(1, len(sys.argv) - 1, 2):
        main(sys.argv[i], sys.argv[i + 1])
