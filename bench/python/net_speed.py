#!/usr/bin/python3
"""net_speed.py — shoal's engine from Python against the same engine from C: forward+backward
of LeNet (examples/lenet.cfg) at batch 64 on one thread, images/s of shoal.Net's
forward(training=True) + backward(labels) loop against `shoal time` (the C engine's forward and
backward), medians of REPS interleaved runs.

    env -u OPENBLAS_CORETYPE bench/python/net_speed.py            # REPS=5, 50 iterations
    bench/python/net_speed.py --reps 1 --iterations 5             # a quick look

Target (issue 32): Python within 5% of C (the wrapper copies no parameters or inputs).
--cfg, --batch, --threads for other nets."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def python_run(cfg, batch, threads, iterations):
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import shoal  # first: it sets OPENBLAS_CORETYPE before numpy opens OpenBLAS
    import numpy as np
    net = shoal.Net(cfg, batch=batch, threads=threads)
    rng = np.random.default_rng(0)
    x = rng.random((batch,) + net.input_shape, dtype=np.float32)
    y = rng.integers(0, net.classes, batch).astype(np.int32)
    for _ in range(2):  # as shoal time: two warm-up iterations
        net.forward(x, training=True)
        net.backward(y)
    t0 = time.perf_counter()
    for _ in range(iterations):
        net.forward(x, training=True)
        net.backward(y)
    return batch * iterations / (time.perf_counter() - t0)


def c_run(shoal_bin, cfg, batch, threads, iterations):
    p = subprocess.run([shoal_bin, "time", cfg, "--batch", str(batch), "--threads", str(threads), "--iterations",
                        str(iterations), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    return batch / (json.loads(p.stdout)["total_ms"] / 1000)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cfg", default=os.path.join(ROOT, "examples", "lenet.cfg"))
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--reps", type=int, default=int(os.environ.get("REPS", 5)))
    p.add_argument("--shoal", default=os.path.join(ROOT, "build", "shoal"))
    p.add_argument("--python-only", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.python_only:
        print(python_run(a.cfg, a.batch, a.threads, a.iterations))
        return
    py, c = [], []
    for _ in range(a.reps):  # each side in a fresh process, interleaved
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--python-only", "--cfg", a.cfg, "--batch",
                              str(a.batch), "--threads", str(a.threads), "--iterations", str(a.iterations)],
                             stdout=subprocess.PIPE, text=True, check=True).stdout
        py.append(float(out.strip().splitlines()[-1]))
        c.append(c_run(a.shoal, a.cfg, a.batch, a.threads, a.iterations))
    mp, mc = statistics.median(py), statistics.median(c)
    print("forward+backward, %s, batch %d, %d thread(s); images/s, medians of %d runs" % (
        os.path.basename(a.cfg), a.batch, a.threads, a.reps))
    print("| shoal.Net (Python) | shoal time (C) | Python / C |")
    print("|---:|---:|---:|")
    print("| %.1f | %.1f | %.3f |" % (mp, mc, mp / mc))


if __name__ == "__main__":
    main()
