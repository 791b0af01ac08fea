#!/usr/bin/python3
"""lbfgs_torch.py — the reference for shoal's --solver lbfgs: softmax regression (one
[connected] layer and [softmax], shoal's parameter order: W then b) trained by PyTorch's
torch.optim.LBFGS(line_search_fn="strong_wolfe"), one iteration per step() (max_iter=1), in
double precision, from the weights of a Darknet .weights file.

  lbfgs_torch.py subset SRC_DIR DST_DIR NTRAIN NTEST
      copy the first NTRAIN training and NTEST test images of the IDX data set in SRC_DIR
      (raw or gzipped) to raw IDX files in DST_DIR
  lbfgs_torch.py init FILE.weights INPUTS CLASSES SEED
      write a Darknet .weights file (version 0.2) of small random weights
  lbfgs_torch.py run DATA_DIR FILE.weights ITERS OUT [HISTORY LR DECAY]
      ITERS iterations from FILE.weights on DATA_DIR's training set; OUT gets, per
      iteration, one line: the loss at the new weights, then the weights (W row-major, b)

  lbfgs_torch.py rosen N ITERS HISTORY LR OUT
      the extended Rosenbrock function of N variables from (-1.2, 1, -1.2, ...): per
      iteration one line: the line search's evaluations, f, then x

Used by tests/train/test_lbfgs.c, tests/cli/test_train_lbfgs.c and bench/lbfgs/run.sh.
"""
import gzip
import os
import struct
import sys

import numpy as np


def open_idx(dir_, stem):
    for name in (stem, stem + ".gz"):
        path = os.path.join(dir_, name)
        if os.path.exists(path):
            raw = open(path, "rb").read()
            return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    raise SystemExit("lbfgs_torch.py: no %s in %s" % (stem, dir_))


def read_split(dir_, prefix):
    img = open_idx(dir_, prefix + "-images-idx3-ubyte")
    lab = open_idx(dir_, prefix + "-labels-idx1-ubyte")
    n, h, w = struct.unpack(">III", img[4:16])
    x = np.frombuffer(img, np.uint8, n * h * w, 16).reshape(n, h * w)
    y = np.frombuffer(lab, np.uint8, n, 8).astype(np.int64)
    return x, y, h, w


def write_split(dir_, prefix, x, y, h, w):
    with open(os.path.join(dir_, prefix + "-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, len(x), h, w))
        f.write(np.ascontiguousarray(x, np.uint8).tobytes())
    with open(os.path.join(dir_, prefix + "-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, len(y)))
        f.write(np.asarray(y, np.uint8).tobytes())


def subset(src, dst, ntrain, ntest):
    os.makedirs(dst, exist_ok=True)
    x, y, h, w = read_split(src, "train")
    write_split(dst, "train", x[:ntrain], y[:ntrain], h, w)
    x, y, h, w = read_split(src, "t10k")
    write_split(dst, "t10k", x[:ntest], y[:ntest], h, w)


def init(path, inputs, classes, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((classes, inputs)) * 0.01).astype(np.float32)
    b = (rng.standard_normal(classes) * 0.01).astype(np.float32)
    with open(path, "wb") as f:
        f.write(struct.pack("<iiiQ", 0, 2, 0, 0))
        f.write(b.tobytes())  # Darknet's [connected]: biases, then weights (outputs x inputs)
        f.write(w.tobytes())


def run(data, weights, iters, out, history=10, lr=1.0, decay=0.0):
    import torch

    dtype = np.float32 if os.environ.get("LBFGS_TORCH_DTYPE") == "float32" else np.float64
    torch.set_default_dtype(torch.float32 if dtype == np.float32 else torch.float64)
    x, y, _, _ = read_split(data, "train")
    classes = int(y.max()) + 1
    raw = open(weights, "rb").read()
    vals = np.frombuffer(raw, np.float32, offset=20)
    inputs = x.shape[1]
    if len(vals) != classes * (inputs + 1):
        raise SystemExit("lbfgs_torch.py: %s holds %d values, softmax regression on %d inputs and %d classes "
                         "has %d" % (weights, len(vals), inputs, classes, classes * (inputs + 1)))
    b = torch.tensor(vals[:classes].astype(dtype), requires_grad=True)
    W = torch.tensor(vals[classes:].astype(dtype).reshape(classes, inputs), requires_grad=True)
    X = torch.tensor(x.astype(dtype) / dtype(255.0))
    Y = torch.tensor(y)
    opt = torch.optim.LBFGS([W, b], lr=lr, max_iter=1, history_size=history, tolerance_grad=1e-7,
                            tolerance_change=1e-9, line_search_fn="strong_wolfe")

    def objective():
        loss = torch.nn.functional.cross_entropy(X @ W.T + b, Y)
        return loss + 0.5 * decay * (W * W).sum() if decay else loss

    def closure():
        opt.zero_grad()
        loss = objective()
        loss.backward()
        return loss

    with open(out, "w") as f:
        for _ in range(iters):
            opt.step(closure)
            with torch.no_grad():
                loss = float(objective())
            vec = torch.cat([W.detach().reshape(-1), b.detach()]).numpy()
            f.write("%.17g %s\n" % (loss, " ".join("%.17g" % v for v in vec)))


def rosen(n, iters, history, lr, out):
    import torch

    torch.set_default_dtype(torch.float64)
    x = torch.tensor([-1.2 if i % 2 == 0 else 1.0 for i in range(n)], requires_grad=True)
    opt = torch.optim.LBFGS([x], lr=lr, max_iter=1, history_size=history, tolerance_grad=1e-7,
                            tolerance_change=1e-9, line_search_fn="strong_wolfe")

    def f():
        return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(0, n, 2))

    def closure():
        opt.zero_grad()
        loss = f()
        loss.backward()
        return loss

    with open(out, "w") as fo:
        for _ in range(iters):
            before = opt.state[x].get("func_evals", 0) if x in opt.state else 0
            opt.step(closure)
            evals = opt.state[x]["func_evals"] - before - 1  # the step's own first evaluation
            with torch.no_grad():
                fx = float(f())
            fo.write("%d %.17g %s\n" % (evals, fx, " ".join("%.17g" % v for v in x.detach().numpy())))


def main(argv):
    if len(argv) >= 6 and argv[1] == "subset":
        subset(argv[2], argv[3], int(argv[4]), int(argv[5]))
    elif len(argv) == 6 and argv[1] == "init":
        init(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
    elif len(argv) == 7 and argv[1] == "rosen":
        rosen(int(argv[2]), int(argv[3]), int(argv[4]), float(argv[5]), argv[6])
    elif len(argv) in (6, 9) and argv[1] == "run":
        extra = (int(argv[6]), float(argv[7]), float(argv[8])) if len(argv) == 9 else ()
        run(argv[2], argv[3], int(argv[4]), argv[5], *extra)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
