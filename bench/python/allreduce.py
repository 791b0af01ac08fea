#!/usr/bin/python3
"""allreduce.py — numpy allreduce from Python on 2 ranks of one host: shoal's comm.allreduce(a,
out=b) against mpi4py's comm.Allreduce(a, b) on Open MPI, float32 sum, 8 B to 64 MiB, and the
C call (`shoal bench allreduce`) at the same sizes for the Python call's own cost; REPS runs
of each interleaved, medians, ratios.

    env -u OPENBLAS_CORETYPE bench/python/allreduce.py                 # REPS=5, 8 B .. 64 MiB
    bench/python/allreduce.py --reps 1 --max 64K --iters-scale 0.1     # a quick look

Per size: ITERS calls (more for small messages) after a warm-up, time per call = the slowest
rank's mean; targets (issue 32): shoal >= mpi4py everywhere, >= 2x from 1 MiB, and at 8 B
the Python call within 2 us of the C call. Run as rank: --rank shoal|mpi4py (by the driver)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"


def sizes(lo, hi):
    s, out = lo, []
    while s <= hi:
        out.append(s)
        s *= 4
    return out


def iters_for(nbytes, scale):
    return max(5, int(scale * min(20000, 2e8 / max(nbytes, 64))))


def placed_array(count, keep):
    """float32[count] on 2 MiB boundaries and 2 MiB pages where the kernel gives them, as the
    C bench's buffers are (numpy's own arrays start 16 bytes into a 4 KiB page)."""
    import mmap
    import numpy as np
    huge = 2 << 20
    m = mmap.mmap(-1, count * 4 + huge)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    keep.append(m)
    raw = np.frombuffer(m, dtype=np.uint8)
    off = -raw.ctypes.data % huge
    return raw[off:off + count * 4].view(np.float32)


def rank_main(kind, lo, hi, scale, placed=False):
    import numpy as np
    if kind == "shoal":
        import shoal
        comm = shoal.init()
        rank = comm.rank

        def call(a, b):
            comm.allreduce(a, out=b)

        def slowest(t):
            v = np.array([t])
            comm.allreduce(v, op="max")
            return float(v[0])
    else:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        rank = comm.Get_rank()

        def call(a, b):
            comm.Allreduce(a, b)

        def slowest(t):
            return comm.allreduce(t, op=MPI.MAX)
    rows = []
    keep = []
    for nbytes in sizes(lo, hi):
        if placed:
            a, b = placed_array(nbytes // 4, keep), placed_array(nbytes // 4, keep)
            a[:] = 1
        else:
            a = np.ones(nbytes // 4, dtype=np.float32)
            b = np.empty_like(a)
        n = iters_for(nbytes, scale)
        for _ in range(max(2, n // 10)):
            call(a, b)
        t0 = time.perf_counter()
        for _ in range(n):
            call(a, b)
        per = (time.perf_counter() - t0) / n
        rows.append({"size": nbytes, "time_us": slowest(per) * 1e6})
        if not (b == 2.0).all():  # two ranks of ones
            sys.exit("allreduce.py: %s gave wrong sums at %d bytes" % (kind, nbytes))
    if rank == 0:
        print(json.dumps(rows), flush=True)


def run_json(cmd, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    if p.returncode != 0:
        sys.exit("allreduce.py: %s failed: %s" % (" ".join(cmd[:4]), p.stderr.strip()[-800:]))
    lines = [ln[len("[rank 0] "):] if ln.startswith("[rank 0] ") else ln for ln in p.stdout.splitlines()
             if not ln.startswith("[rank ") or ln.startswith("[rank 0] ")]
    for i, line in enumerate(lines):
        if line.startswith("[") or line.startswith("{"):
            try:
                return json.loads("\n".join(lines[i:]))
            except ValueError:
                try:
                    return json.loads(line)
                except ValueError:
                    continue
    sys.exit("allreduce.py: no result from %s: %s" % (" ".join(cmd[:4]), p.stdout[-500:]))


def c_rows(shoal_bin, lo, hi, scale):
    """The C call's time per size from `shoal bench allreduce` (out of place, as above)."""
    out = []
    for nbytes in sizes(lo, hi):
        n = iters_for(nbytes, scale)
        r = run_json([shoal_bin, "launch", "-n", "2", shoal_bin, "bench", "allreduce", "-b", str(nbytes), "-e",
                      str(nbytes), "--iters", str(n), "-w", str(max(2, n // 10)), "-c", "0", "--json"])
        out.append({"size": nbytes, "time_us": r["rows"][0]["time_us"]})
    return out


def human(n):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return "%d %s" % (n // k, unit)
    return "%d B" % n


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1].upper(), 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank", choices=["shoal", "shoal-placed", "mpi4py"], help="run as one rank (the driver does this)")
    p.add_argument("--reps", type=int, default=int(os.environ.get("REPS", 5)))
    p.add_argument("--min", default="8")
    p.add_argument("--max", default="64M")
    p.add_argument("--iters-scale", type=float, default=1.0)
    p.add_argument("--shoal", default=os.path.join(ROOT, "build", "shoal"))
    a = p.parse_args()
    lo, hi = parse_size(a.min), parse_size(a.max)
    if a.rank:
        return rank_main(a.rank.split("-")[0], lo, hi, a.iters_scale, a.rank.endswith("-placed"))
    me = os.path.abspath(__file__)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"), OMP_NUM_THREADS="1")
    args = ["--min", a.min, "--max", a.max, "--iters-scale", str(a.iters_scale)]
    res = {"shoal": [], "shoal-placed": [], "mpi4py": [], "C": []}
    for rep in range(a.reps):
        for kind in ("shoal", "shoal-placed"):
            res[kind].append(run_json([a.shoal, "launch", "-n", "2", PY, me, "--rank", kind] + args, env))
        res["mpi4py"].append(run_json(["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-np", "2", PY,
                                       me, "--rank", "mpi4py"] + args, env))
        res["C"].append(c_rows(a.shoal, lo, hi, a.iters_scale))
        print("rep %d of %d done" % (rep + 1, a.reps), file=sys.stderr, flush=True)
    med = {k: [statistics.median(r[i]["time_us"] for r in v) for i in range(len(v[0]))] for k, v in res.items()}
    print("numpy allreduce, float32 sum, 2 ranks on one host, out of place; medians of %d runs (us per call)" % a.reps)
    print("| size | shoal (Python) | mpi4py (Open MPI) | mpi4py / shoal | shoal C call | Python's cost "
          "| shoal (Python, placed) | placed over C |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, nbytes in enumerate(sizes(lo, hi)):
        s, m, c, p = med["shoal"][i], med["mpi4py"][i], med["C"][i], med["shoal-placed"][i]
        print("| %s | %.2f | %.2f | %.2fx | %.2f | %+.2f | %.2f | %+.2f |" % (human(nbytes), s, m, m / s, c, s - c,
                                                                         p, p - c))
    print("Both sides are out of place into an output the caller allocated once: mpi4py's Allreduce(a, b), "
          "shoal's allreduce(a, out=b).\nplaced: the same Python call on buffers laid out as the C bench's "
          "(2 MiB boundaries, 2 MiB pages); numpy's arrays start 16 bytes into a 4 KiB page.")


if __name__ == "__main__":
    main()
