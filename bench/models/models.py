#!/usr/bin/python3
"""models.py — the peers' half of bench/models/run.sh (scikit-learn's BernoulliRBM, the same
convolutional autoencoder in PyTorch) and the data it prepares for both sides:

  binarize SRC DST                 Fashion-MNIST's IDX files thresholded at 128 (0 or 255), raw IDX
  subset SRC DST FRACTION SEED     a seeded FRACTION of SRC's training images and labels; its test set whole
  sklearn-rbm DATA EPOCHS BATCH LR HIDDEN SEED
                                   BernoulliRBM (persistent CD) fitted on DATA's training images at one
                                   thread; JSON: fit seconds, mean pseudo-likelihood of the test images (score_samples
                                   averaged over 8 fixed draws of the flipped units, as score-rbm's)
  score-rbm WEIGHTS DATA HIDDEN SEED
                                   the pseudo-likelihood scikit-learn's score_samples gives shoal's [rbm]
                                   weights (a shoal checkpoint: W (K, I), b (K), c (I))
  ae-init OUT SEED                 PyTorch's default initialisation of examples/conv-autoencoder.cfg's net,
                                   written as Darknet .weights (shoal train --weights reads it)
  torch-ae DATA INIT EPOCHS BATCH LR SEED
                                   that net in PyTorch from INIT: SGD with momentum 0.9, 1/2 the summed squared
                                   error per image, the images in the order shoal's loader reads them with
                                   --seed SEED (src/data/loader.c, src/base/util.c's generator, rebuilt here), so
                                   both take the same steps; JSON: test loss (the same sum), training images/s
Every timing runs at one thread (the caller sets OPENBLAS_NUM_THREADS=1 and OMP_NUM_THREADS=1)."""
import gzip
import json
import os
import struct
import sys
import time

import numpy as np


def idx_read(path):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    raw = opener(path, "rb").read()
    magic, n = struct.unpack(">II", raw[:8])
    if magic == 0x803:
        h, w = struct.unpack(">II", raw[8:16])
        return np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, h * w)
    return np.frombuffer(raw, dtype=np.uint8, offset=8)


def idx_write(path, a):
    with open(path, "wb") as f:
        if a.ndim == 2:
            side = int(round(a.shape[1] ** 0.5))
            f.write(struct.pack(">IIII", 0x803, a.shape[0], side, side))
        else:
            f.write(struct.pack(">II", 0x801, a.shape[0]))
        f.write(np.ascontiguousarray(a, dtype=np.uint8).tobytes())


def find(d, split, kind):
    for name in ("%s-%s-idx%d-ubyte" % (split, kind, 3 if kind == "images" else 1),):
        for ext in ("", ".gz"):
            if os.path.exists(os.path.join(d, name + ext)):
                return os.path.join(d, name + ext)
    raise SystemExit("models.py: no %s %s in %s" % (split, kind, d))


def load(d, split):
    return idx_read(find(d, split, "images")), idx_read(find(d, split, "labels"))


def binarize(src, dst):
    os.makedirs(dst, exist_ok=True)
    for split in ("train", "t10k"):
        x, y = load(src, split)
        idx_write(os.path.join(dst, split + "-images-idx3-ubyte"), np.where(x >= 128, 255, 0))
        idx_write(os.path.join(dst, split + "-labels-idx1-ubyte"), y)


def subset(src, dst, fraction, seed):
    os.makedirs(dst, exist_ok=True)
    x, y = load(src, "train")
    keep = np.random.RandomState(int(seed)).permutation(len(x))[:int(len(x) * float(fraction))]
    idx_write(os.path.join(dst, "train-images-idx3-ubyte"), x[keep])
    idx_write(os.path.join(dst, "train-labels-idx1-ubyte"), y[keep])
    x, y = load(src, "t10k")
    idx_write(os.path.join(dst, "t10k-images-idx3-ubyte"), x)
    idx_write(os.path.join(dst, "t10k-labels-idx1-ubyte"), y)


SCORE_DRAWS = 8  # score_samples flips one random unit per image: averaged over this many draws


def pseudo_likelihood(rbm, t):
    """The mean of score_samples over SCORE_DRAWS seeded draws of the flipped units (the same
    draws for every model scored)."""
    keep, total = rbm.random_state, 0.0
    for k in range(SCORE_DRAWS):
        rbm.random_state = 1000 + k
        total += float(rbm.score_samples(t).mean())
    rbm.random_state = keep
    return total / SCORE_DRAWS


def sklearn_rbm(data, epochs, batch, lr, hidden, seed):
    from sklearn.neural_network import BernoulliRBM
    x = load(data, "train")[0].astype(np.float64) / 255.0
    t = load(data, "t10k")[0].astype(np.float64) / 255.0
    rbm = BernoulliRBM(n_components=int(hidden), learning_rate=float(lr), batch_size=int(batch),
                       n_iter=int(epochs), random_state=int(seed))
    t0 = time.perf_counter()
    rbm.fit(x)
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "pl": pseudo_likelihood(rbm, t), "images_per_s": len(x) * int(epochs) / seconds}))


def ckpt_section(path, want):
    raw = open(path, "rb").read()
    if raw[:8] != b"SHOALCKP":
        raise SystemExit("models.py: %s is not a shoal checkpoint" % path)
    nsec = struct.unpack_from("<I", raw, 12)[0]
    pos = 16
    for _ in range(nsec):
        name = raw[pos:pos + 32].split(b"\0")[0].decode()
        nbytes = struct.unpack_from("<Q", raw, pos + 32)[0]
        pos += 44
        if name == want:
            return np.frombuffer(raw, dtype=np.float32, count=nbytes // 4, offset=pos)
        pos += nbytes
    raise SystemExit("models.py: %s has no section %s" % (path, want))


def score_rbm(weights, data, hidden, seed):
    from sklearn.neural_network import BernoulliRBM
    t = load(data, "t10k")[0].astype(np.float64) / 255.0
    p = ckpt_section(weights, "params").astype(np.float64)
    k, i = int(hidden), t.shape[1]
    rbm = BernoulliRBM(n_components=k, random_state=int(seed))
    rbm.components_ = p[:k * i].reshape(k, i)
    rbm.intercept_hidden_ = p[k * i:k * i + k]
    rbm.intercept_visible_ = p[k * i + k:k * i + k + i]
    print(json.dumps({"pl": pseudo_likelihood(rbm, t)}))


def ae_net():
    import torch.nn as nn
    return nn.Sequential(nn.Conv2d(1, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                         nn.ConvTranspose2d(32, 16, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(16, 1, 4, 2, 1),
                         nn.Sigmoid())


def weighted(net):
    return [m for m in net if hasattr(m, "weight")]


def ae_init(out, seed):
    import torch
    torch.manual_seed(int(seed))
    net = ae_net()
    with open(out, "wb") as f:
        f.write(struct.pack("<iiiQ", 0, 2, 0, 0))
        for m in weighted(net):  # Darknet's order: biases, then weights as stored
            f.write(m.bias.detach().numpy().astype(np.float32).tobytes())
            f.write(m.weight.detach().numpy().astype(np.float32).tobytes())


def ae_load(net, path):
    import torch
    data = np.frombuffer(open(path, "rb").read(), dtype=np.float32, offset=20)
    pos = 0
    with torch.no_grad():
        for m in weighted(net):
            for p in (m.bias, m.weight):
                n = p.numel()
                p.copy_(torch.from_numpy(data[pos:pos + n].copy()).reshape(p.shape))
                pos += n


M64 = (1 << 64) - 1


class ShoalRng:
    """src/base/util.c's sh_rng: xoshiro256** seeded by splitmix64."""

    def __init__(self, seed):
        self.s, x = [], seed & M64
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ (z >> 31))

    def u64(self):
        s = self.s
        rotl = lambda v, k: ((v << k) | (v >> (64 - k))) & M64
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, n):
        limit = M64 - M64 % n  # UINT64_MAX - UINT64_MAX % n, rejection as util.c
        while True:
            x = self.u64()
            if x < limit:
                return x % n


def shoal_order(count, seed, epoch):
    """loader.c's build_order: Fisher-Yates from (seed, epoch)."""
    rng = ShoalRng(seed ^ ((0x9E3779B97F4A7C15 * (epoch + 1)) & M64))
    order = list(range(count))
    for i in range(count - 1, 0, -1):
        j = rng.below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def torch_ae(data, init, epochs, batch, lr, seed):
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(int(seed))
    x = torch.from_numpy(load(data, "train")[0].astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    t = torch.from_numpy(load(data, "t10k")[0].astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    net = ae_net()
    ae_load(net, init)
    opt = torch.optim.SGD(net.parameters(), lr=float(lr), momentum=0.9)
    b = int(batch)
    steps = len(x) // b  # whole batches, as shoal (drop_last)
    seconds = 0.0
    for epoch in range(int(epochs)):
        order = torch.tensor(shoal_order(len(x), int(seed), epoch))
        t0 = time.perf_counter()
        for s in range(steps):
            xb = x[order[s * b:(s + 1) * b]]
            loss = 0.5 * ((net(xb) - xb) ** 2).sum() / b
            opt.zero_grad()
            loss.backward()
            opt.step()
        seconds += time.perf_counter() - t0
    with torch.no_grad():
        total = sum(float(0.5 * ((net(t[i:i + 500]) - t[i:i + 500]) ** 2).sum()) for i in range(0, len(t), 500))
    print(json.dumps({"test_loss": total / len(t), "images_per_s": steps * b * int(epochs) / seconds}))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"binarize": binarize, "subset": subset, "sklearn-rbm": sklearn_rbm, "score-rbm": score_rbm,
     "ae-init": ae_init, "torch-ae": torch_ae}[cmd](*args)
