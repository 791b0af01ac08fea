#!/usr/bin/python3
"""torch_loader.py DIR WORKERS [BATCH STEPS WARMUP SIZE RESIZE] — PyTorch's DataLoader over
torchvision's ImageFolder with the transforms bench_loader.c gives shoal: Resize(RESIZE)
(shorter side), RandomCrop(SIZE), RandomHorizontalFlip, ToTensor, Normalize; shuffled, WORKERS
worker processes (0: in the main process), images/s over STEPS batches after WARMUP; one JSON
line. DIR/train when there is one (ImageNet's layout, as shoal reads it), else DIR."""
import json
import os
import resource
import sys
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def main():
    root, workers = sys.argv[1], int(sys.argv[2])
    batch, steps, warmup, size, resize = (int(a) for a in (sys.argv[3:8] + ["32", "50", "5", "224", "256"][len(sys.argv[3:8]):]))
    torch.set_num_threads(1)
    torch.manual_seed(1)
    tf = transforms.Compose([transforms.Resize(resize), transforms.RandomCrop(size), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    t = time.perf_counter()
    train = os.path.join(root, "train") if os.path.isdir(os.path.join(root, "train")) else root
    ds = datasets.ImageFolder(train, tf)
    list_s = time.perf_counter() - t
    dl = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, drop_last=True,
                    persistent_workers=workers > 0)
    it, n = iter(dl), 0
    for k in range(warmup + steps):
        if k == warmup:
            t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(dl)
            x, y = next(it)
        n += x.shape[0] if k >= warmup else 0
    s = time.perf_counter() - t0
    rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss + workers * resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    print(json.dumps({"loader": "torch", "threads": workers, "batch": batch, "steps": steps,
                      "images_per_s": round(n / s, 1), "list_s": round(list_s, 3), "files": len(ds),
                      "peak_rss_mb_estimate": round(rss, 1)}))


if __name__ == "__main__":
    main()
