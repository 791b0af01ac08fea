#!/usr/bin/python3
"""fashion_png.py OUT [SRC=/usr/share/datasets/fashion-mnist] [NTRAIN] [NTEST] — Fashion-MNIST
written out as PNG class folders, as a user's own pictures would be: OUT/0..9/NNNNN.png (the
training set, in the IDX files' order within each class) and OUT/val/0..9/ (the test set);
beside them OUT-train.txt and OUT-val.txt list the same files in the IDX files' order (a
list file trains on the same sequence as the IDX files). NTRAIN / NTEST keep only the first
pictures (default: all 60000 and 10000)."""
import gzip
import os
import struct
import sys

import numpy as np
from PIL import Image

out = sys.argv[1]
src = sys.argv[2] if len(sys.argv) > 2 else "/usr/share/datasets/fashion-mnist"
limits = [int(a) for a in sys.argv[3:5]] + [None, None]


def idx(path):
    raw = gzip.open(path).read()
    dims = raw[3]
    shape = struct.unpack(f">{dims}I", raw[4:4 + 4 * dims])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


for (split, prefix), limit in zip([("", "train"), ("val", "t10k")], limits):
    images = idx(os.path.join(src, f"{prefix}-images-idx3-ubyte.gz"))[:limit]
    labels = idx(os.path.join(src, f"{prefix}-labels-idx1-ubyte.gz"))[:limit]
    for c in range(10):
        os.makedirs(os.path.join(out, split, str(c)), exist_ok=True)
    with open(f"{out.rstrip('/')}-{prefix if prefix == 'train' else 'val'}.txt", "w") as lst:
        for i, (im, y) in enumerate(zip(images, labels)):
            rel = os.path.join(os.path.basename(out.rstrip("/")), split, str(y), f"{i:05d}.png")
            Image.fromarray(im, "L").save(os.path.join(out, split, str(y), f"{i:05d}.png"))
            lst.write(f"{rel} {y}\n")
    print(f"{out}/{split or '.'}: {len(images)} pictures")
