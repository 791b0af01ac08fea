#!/usr/bin/python3
"""torch_char.py — PyTorch's side of bench/rnn/run.sh: a character-level model the same as
examples/char-{lstm,gru,rnn}.cfg (one-hot of 256 bytes -> LAYERS recurrent layers of HIDDEN
-> linear 256 -> softmax cross-entropy, Adam), on the same text split the same way (the last
tenth, at most 1 MiB, held out; BATCH streams of contiguous segments read TIME_STEPS bytes at
a time, the state carried from batch to batch and cut from the graph there).

  torch_char.py --data FILE --kind lstm --threads 1 --steps 20            # chars/s
  torch_char.py --data FILE --kind lstm --threads 1 --seconds 600 --eval   # bits/char

Prints one JSON line: chars_per_s (steps after the first warm-up ones), steps, and with
--eval the held-out test_bpc."""
import argparse
import json
import math
import time

import numpy as np
import torch


def split(path):
    raw = np.fromfile(path, dtype=np.uint8)
    ntest = min(len(raw) // 10, 1 << 20)
    return raw[: len(raw) - ntest], raw[len(raw) - ntest:]


class DarknetRNN(torch.nn.Module):
    """Darknet's [rnn] as layers PyTorch has: nn.RNN (tanh) then, per layer, the output
    sublayer Darknet adds (a connected HIDDEN x HIDDEN with tanh, outside the recurrence),
    so both sides do the same arithmetic. nn.RNN stays fused; the output sublayers run on
    all time steps at once."""

    def __init__(self, hidden, layers):
        super().__init__()
        self.cells = torch.nn.ModuleList(
            torch.nn.RNN(256 if i == 0 else hidden, hidden) for i in range(layers))
        self.outs = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(layers))

    def forward(self, x, state):
        states = []
        for i, (cell, out) in enumerate(zip(self.cells, self.outs)):
            x, s = cell(x, None if state is None else state[i])
            states.append(s)
            x = torch.tanh(out(x))
        return x, torch.stack(states)


class Model(torch.nn.Module):
    def __init__(self, kind, hidden, layers):
        super().__init__()
        if kind == "rnn":
            self.rnn = DarknetRNN(hidden, layers)
        else:
            cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn-plain": torch.nn.RNN}[kind]
            self.rnn = cls(256, hidden, num_layers=layers)
        self.out = torch.nn.Linear(hidden, 256)

    def forward(self, x, state):
        y, state = self.rnn(x, state)
        return self.out(y), state


def detach(state):
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s.detach() for s in state)
    return state.detach()


def batches(data, streams, steps):
    seg = len(data) // streams
    nsteps = (seg - 1) // steps
    starts = np.arange(streams) * seg
    eye = torch.eye(256)
    k = 0
    while True:
        idx = starts[None, :] + k * steps + np.arange(steps)[:, None]  # (T, B)
        x = eye[torch.from_numpy(data[idx].astype(np.int64))]
        y = torch.from_numpy(data[idx + 1].astype(np.int64))
        yield x, y
        k = (k + 1) % nsteps


def evaluate(model, data, streams, steps):
    seg = len(data) // streams
    nsteps = (seg - 1) // steps
    it = batches(data, streams, steps)
    state, total, count = None, 0.0, 0
    with torch.no_grad():
        for _ in range(nsteps):
            x, y = next(it)
            out, state = model(x, state)
            total += torch.nn.functional.cross_entropy(out.reshape(-1, 256), y.reshape(-1),
                                                       reduction="sum").item()
            count += y.numel()
    return total / count / math.log(2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--kind", default="lstm", choices=["lstm", "gru", "rnn", "rnn-plain"])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--time-steps", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train, test = split(a.data)
    model = Model(a.kind, a.hidden, a.layers)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    it = batches(train, a.batch, a.time_steps)
    state, done, warm = None, 0, min(3, max(a.steps // 10, 1))
    t_start = time.perf_counter()
    t_warm = None
    while True:
        if a.seconds > 0:
            if time.perf_counter() - t_start >= a.seconds:
                break
        elif done >= a.steps:
            break
        x, y = next(it)
        out, state = model(x, detach(state))
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, 256), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        done += 1
        if done == warm:
            t_warm = time.perf_counter()
    t_end = time.perf_counter()
    timed = done - warm
    res = {"kind": a.kind, "threads": a.threads, "steps": done,
           "chars_per_s": timed * a.batch * a.time_steps / (t_end - t_warm) if timed > 0 else 0,
           "train_bpc": loss.item() / math.log(2)}
    if a.eval:
        res["test_bpc"] = evaluate(model, test, a.batch, a.time_steps)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
