#!/usr/bin/python3
"""make_jpegs.py DIR [N=2000] [CLASSES=10] [VAL=200] — a folder of JPEG photos-alike for the
loader and training benchmarks, laid out as ImageNet unpacks: DIR/train/c00..c09/*.jpg and
DIR/val/c00..c09/*.jpg, N training pictures, sizes
drawn as ImageNet's are (shorter side 256-480, aspect 4:3 or 3:4 mostly), smooth colour fields
with edges and noise (quality 90, 4:2:0) so decoding costs what a photo costs."""
import os
import sys

import numpy as np
from PIL import Image

root = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
classes = int(sys.argv[3]) if len(sys.argv) > 3 else 10
nval = int(sys.argv[4]) if len(sys.argv) > 4 else 200
rng = np.random.default_rng(1)


def photo(h, w, c):
    # a low-resolution random field blown up (smooth regions), a class tint, edges, noise
    small = rng.integers(0, 256, (max(h // 32, 2), max(w // 32, 2), 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(small).resize((w, h), Image.BICUBIC), dtype=np.int16)
    tint = np.array([(c * 53) % 256, (c * 97) % 256, (c * 151) % 256], np.int16)
    base = (base * 3 + tint) // 4
    y0, x0 = rng.integers(0, h), rng.integers(0, w)
    base[y0:y0 + h // 4, :, :] += 40
    base[:, x0:x0 + w // 6, :] -= 40
    base += rng.integers(-12, 13, base.shape, dtype=np.int16)
    return np.clip(base, 0, 255).astype(np.uint8)


def size():
    short = int(rng.integers(256, 481))
    long = int(short * (4 / 3 if rng.random() < 0.8 else rng.uniform(1.0, 1.8)))
    return (short, long) if rng.random() < 0.75 else (long, short)  # (h, w): landscape mostly


for split, count in [("train", n), ("val", nval)]:
    for i in range(count):
        c = i % classes
        d = os.path.join(root, split, f"c{c:02d}")
        os.makedirs(d, exist_ok=True)
        h, w = size()
        Image.fromarray(photo(h, w, c)).save(os.path.join(d, f"{i:06d}.jpg"), quality=90)
print(f"{root}: {n} training and {nval} held-out JPEGs in {classes} classes")
