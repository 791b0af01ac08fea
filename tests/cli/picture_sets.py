#!/usr/bin/python3
"""picture_sets.py DIR — the data of tests/cli/test_train_images.c, written into DIR:
  pics/{c0,c1,c2}/, pics/val/{c0,c1,c2}/   a learnable folder: class = stripe direction
      (horizontal, vertical, diagonal) in random colours; JPEG and PNG, RGB and grey, sizes
      around 28 x 28
  train.txt, val.txt                       the same pictures as Caffe list files, in the
      folder's order (paths relative to DIR)
  fmnist/{0..9}/, fmnist/val/{0..9}/       the first NTRAIN and NTEST Fashion-MNIST pictures
      as PNG class folders
  fmnist_idx/                              the same pictures as IDX files, in the folder's
      order (class by class), so both train on the same sequence
"""
import gzip
import os
import struct
import sys

import numpy as np
from PIL import Image

out = sys.argv[1]
rng = np.random.default_rng(3)
NTRAIN, NTEST = 3000, 500


def stripes(kind, h, w):
    y, x = np.mgrid[0:h, 0:w]
    period = rng.integers(4, 7)
    phase = rng.integers(0, period)
    v = [(y + phase) // (period // 2), (x + phase) // (period // 2), (x + y + phase) // (period // 2)][kind] % 2
    lo, hi = rng.integers(0, 80, 3), rng.integers(170, 256, 3)
    img = np.where(v[..., None] == 1, hi, lo) + rng.integers(-20, 21, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def picture_folder():
    root = os.path.join(out, "pics")
    lists = {"train": [], "val": []}
    for split, n in [("train", 30), ("val", 10)]:
        for c in range(3):
            sub = os.path.join(root, "" if split == "train" else "val", f"c{c}")
            os.makedirs(sub, exist_ok=True)
            for i in range(n):
                h, w = int(rng.integers(24, 36)), int(rng.integers(24, 36))
                img = Image.fromarray(stripes(c, h, w))
                if i % 5 == 4:
                    img = img.convert("L")
                name = f"{i:03d}.{'jpg' if i % 2 else 'png'}"
                if name.endswith("jpg"):
                    img.save(os.path.join(sub, name), quality=92)
                else:
                    img.save(os.path.join(sub, name))
                lists[split].append((os.path.relpath(os.path.join(sub, name), out), c))
    for split in lists:
        with open(os.path.join(out, f"{split}.txt"), "w") as f:
            for p, c in lists[split]:
                f.write(f"{p} {c}\n")


def idx_read(path):
    raw = gzip.open(path).read()
    dims = raw[3]
    shape = struct.unpack(f">{dims}I", raw[4:4 + 4 * dims])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


def idx_write(path, arr):
    with open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, 8, arr.ndim))
        f.write(struct.pack(f">{arr.ndim}I", *arr.shape))
        f.write(np.ascontiguousarray(arr).tobytes())


def fashion():
    src = "/usr/share/datasets/fashion-mnist"
    os.makedirs(os.path.join(out, "fmnist_idx"))
    for split, prefix, n in [("", "train", NTRAIN), ("val", "t10k", NTEST)]:
        images = idx_read(os.path.join(src, f"{prefix}-images-idx3-ubyte.gz"))[:n]
        labels = idx_read(os.path.join(src, f"{prefix}-labels-idx1-ubyte.gz"))[:n]
        order = np.argsort(labels, kind="stable")  # the folder's order: class by class
        for i in order:
            sub = os.path.join(out, "fmnist", split, str(labels[i]))
            os.makedirs(sub, exist_ok=True)
            Image.fromarray(images[i], "L").save(os.path.join(sub, f"{i:05d}.png"))
        idx_write(os.path.join(out, "fmnist_idx", f"{prefix}-images-idx3-ubyte"), images[order])
        idx_write(os.path.join(out, "fmnist_idx", f"{prefix}-labels-idx1-ubyte"), labels[order])


picture_folder()
if len(sys.argv) < 3 or sys.argv[2] != "--no-fashion":
    fashion()
