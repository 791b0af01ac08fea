"""collectives.py — one rank of tests/python/test_collectives.py: every collective of
shoal.Comm against numpy's own result over the ranks' inputs, for each dtype and op, in place
and into out, blocking and started, at counts around the rank count and past a chunk, on
numpy arrays, bytearray and memoryview. Inputs are small integers, so every order of summing
gives the same bits. Prints "rank R: N checks, 0 failed" and exits 1 on any failure."""
import sys

import numpy as np

import shoal

comm = shoal.init()
R, N = comm.rank, comm.size
checks = 0
fails = []


def check(cond, msg):
    global checks
    checks += 1
    if not cond:
        fails.append(msg)


NP = {"int8": np.int8, "uint8": np.uint8, "int32": np.int32, "int64": np.int64,
      "float16": np.float16, "float32": np.float32, "float64": np.float64}
DTYPES = list(NP) + ["bfloat16"]
FLOATS = ("float16", "bfloat16", "float32", "float64")
OPS = ("sum", "prod", "min", "max", "avg")


def to_bf16(x):
    return (np.asarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def from_bf16(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def values(rank, n, dt, op):
    """Rank `rank`'s input as float64: small integers (1..2 for prod, -2..2 for signed types)."""
    i = np.arange(n, dtype=np.int64)
    if op == "prod":
        v = 1 + (i + rank) % 2
    else:
        v = (i * 7 + rank * 3) % 5
        if dt not in ("uint8",):
            v = v - 2
    return v.astype(np.float64)


def encode(v, dt):
    return to_bf16(v) if dt == "bfloat16" else v.astype(NP[dt])


def decode(a, dt):
    return from_bf16(a).astype(np.float64) if dt == "bfloat16" else a.astype(np.float64)


def expect(dt, op, n):
    allv = np.stack([values(q, n, dt, op) for q in range(N)]) if n else np.zeros((N, 0))
    f = {"sum": np.sum, "prod": np.prod, "min": np.min, "max": np.max}.get(op)
    if op == "avg":  # integers: the sum divided as C divides, toward zero
        mean = allv.sum(axis=0) / N
        return mean if dt in FLOATS else np.trunc(mean)
    return f(allv, axis=0)


def close(got, want, dt):
    if dt not in FLOATS:
        return got.shape == want.shape and np.array_equal(got, want)
    tol = 1e-2 if dt in ("float16", "bfloat16") else 1e-6
    return got.shape == want.shape and np.allclose(got, want, rtol=tol, atol=tol)


def kw(dt):
    return {"dtype": "bfloat16"} if dt == "bfloat16" else {}


COUNTS = sorted({0, 1, max(N - 1, 1), N + 1, 1009, 70001})

# allreduce: each dtype and op, in place and into out, blocking and started
for dt in DTYPES:
    for op in OPS:
        for n in COUNTS:
            want = expect(dt, op, n)
            a = encode(values(R, n, dt, op), dt)
            r = comm.allreduce(a, op=op, **kw(dt))
            check(r is a and close(decode(a, dt), want, dt), "allreduce %s %s n=%d in place" % (dt, op, n))
            a = encode(values(R, n, dt, op), dt)
            keep = a.copy()
            out = np.empty_like(a)
            r = comm.allreduce(a, op, out, **kw(dt))
            check(r is out and close(decode(out, dt), want, dt) and np.array_equal(a, keep),
                  "allreduce %s %s n=%d into out" % (dt, op, n))
            a = encode(values(R, n, dt, op), dt)
            h = comm.allreduce_start(a, op=op, **kw(dt))
            r = h.wait()
            check(r is a and close(decode(a, dt), want, dt), "allreduce_start %s %s n=%d" % (dt, op, n))

# started allreduces of mixed sizes in flight together, tested and waited in any order
sizes = [1, 3, 100, 4096, 65537, 1 << 20]
arrs = [values(R, n, "float32", "sum").astype(np.float32) for n in sizes]
hs = [comm.allreduce_start(a) for a in arrs]
done = [False] * len(hs)
for _ in range(200000):
    for i, h in enumerate(hs):
        if not done[i]:
            done[i] = h.test()
    if all(done):
        break
check(all(done), "started allreduces never tested done: %s" % done)
for h, a, n in zip(reversed(hs), reversed(arrs), reversed(sizes)):
    h.wait()
    check(close(a.astype(np.float64), expect("float32", "sum", n), "float32"), "mixed sizes n=%d" % n)

# broadcast, reduce from every root
for dt in ("uint8", "int64", "float16", "bfloat16", "float32", "float64"):
    for root in range(N):
        for n in (0, 1, 1009, 70001):
            a = encode(values(R, n, dt, "sum"), dt)
            comm.broadcast(a, root=root, **kw(dt))
            check(close(decode(a, dt), values(root, n, dt, "sum"), dt), "broadcast %s root %d n=%d" % (dt, root, n))
            a = encode(values(R, n, dt, "sum"), dt)
            out = np.zeros_like(a)
            comm.reduce(a, root, "max", out=out, **kw(dt))
            if R == root:
                check(close(decode(out, dt), expect(dt, "max", n), dt), "reduce %s root %d n=%d" % (dt, root, n))
            else:
                check(not out.any(), "reduce wrote out on rank %d (root %d)" % (R, root))

# allgather, reduce_scatter, alltoall (results allocated, and into out)
for dt in ("int8", "int32", "float16", "float32", "float64"):
    for n in (1, 5, 1009):
        a = encode(values(R, n, dt, "sum"), dt).reshape(1, n)
        g = comm.allgather(a)
        want = np.stack([values(q, n, dt, "sum") for q in range(N)]).reshape(N, 1, n)
        check(g.shape == (N, 1, n) and close(decode(g, dt), want, dt), "allgather %s n=%d" % (dt, n))
        big = np.concatenate([values(R * 10 + p, n, dt, "sum") for p in range(N)])
        a = encode(big, dt)
        rs = comm.reduce_scatter(a, op="sum")
        want = sum(np.concatenate([values(q * 10 + p, n, dt, "sum") for p in range(N)]) for q in range(N))
        check(close(decode(rs, dt), want[R * n:(R + 1) * n], dt), "reduce_scatter %s n=%d" % (dt, n))
        out = np.empty(N * n, dtype=a.dtype)
        comm.alltoall(a, out)
        want = np.concatenate([values(q * 10 + R, n, dt, "sum") for q in range(N)])
        check(close(decode(out, dt), want, dt), "alltoall %s n=%d" % (dt, n))

# other buffers: bytearray, memoryview, 2-D arrays, all in place
b = bytearray([R + 1] * 10)
comm.allreduce(b)
check(list(b) == [N * (N + 1) // 2] * 10, "bytearray allreduce: %s" % list(b))
m = np.full((3, 4), R + 1, dtype=np.int32)
comm.allreduce(memoryview(m), op="max")
check((m == N).all(), "memoryview allreduce max: %s" % m)
m = np.full((3, 4), float(R), dtype=np.float64)
comm.allreduce(m[1:], op="sum")
check((m[1:] == N * (N - 1) / 2).all() and (m[0] == R).all(), "a contiguous slice in place")

# send / recv around a ring, two tags
if N > 1:
    nxt, prv = (R + 1) % N, (R - 1) % N
    for tag in (0, 7):
        s = np.full(100, R * 100 + tag, dtype=np.int64)
        comm.send(s, nxt, tag)
        r = np.zeros(100, dtype=np.int64)
        comm.recv(r, prv, tag)
        check((r == prv * 100 + tag).all(), "recv from %d tag %d: %s" % (prv, tag, r[:3]))

# split: even and odd ranks, ordered by descending key; color < 0 joins none
sub = comm.split(R % 2, key=-R)
mine = [q for q in range(N) if q % 2 == R % 2]
check(sub.size == len(mine) and sub.rank == sorted(mine, reverse=True).index(R),
      "split: rank %d of %d" % (sub.rank, sub.size))
x = np.array([R], dtype=np.int64)
sub.allreduce(x)
check(x[0] == sum(mine), "allreduce on the split: %d, want %d" % (x[0], sum(mine)))
none = comm.split(-1 if R == 0 else 1)
check((none is None) == (R == 0), "split with color -1: %r" % none)
comm.barrier()
sub.close()
if none is not None:
    none.close()

check(shoal.init() is comm, "init() is not idempotent")
check(comm.local_rank == R and comm.local_size == N and comm.nhosts == 1,
      "local_rank %d local_size %d nhosts %d" % (comm.local_rank, comm.local_size, comm.nhosts))
comm.barrier()
for f in fails[:20]:
    print("FAIL rank %d: %s" % (R, f))
print("rank %d: %d checks, %d failed" % (R, checks, len(fails)))
sys.exit(1 if fails else 0)
