#!/usr/bin/python3
"""torch_train.py MODEL BATCH THREADS STEPS [--data DIR --workers N] — the torchvision peer of
models.sh: training images/s of MODEL (alexnet, vgg16, googlenet, resnet50; 1000 classes, 224
x 224) at BATCH on THREADS threads, SGD with momentum, over STEPS steps after 2 warm-up ones;
on random tensors, or with --data on a JPEG folder through DataLoader + ImageFolder with the
transforms bench_loader.c gives shoal (Resize 256, RandomCrop 224, flip, Normalize) and N
worker processes, timing how long each step waited for its batch. One JSON line: images_per_s,
peak_rss_mb (this process; its workers' high-water marks added when there are some),
data_wait_share."""
import argparse
import json
import os
import resource
import time

import torch
import torch.nn as nn
import torchvision


def build(name):
    m = {"alexnet": lambda: torchvision.models.alexnet(num_classes=1000),
         "vgg16": lambda: torchvision.models.vgg16(num_classes=1000),
         "googlenet": lambda: torchvision.models.googlenet(num_classes=1000, aux_logits=False, init_weights=False),
         "resnet50": lambda: torchvision.models.resnet50(num_classes=1000)}[name]
    return m()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("batch", type=int)
    ap.add_argument("threads", type=int)
    ap.add_argument("steps", type=int)
    ap.add_argument("--data")
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = build(a.model)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    lossf = nn.CrossEntropyLoss()
    if a.data:
        from torchvision import datasets, transforms
        tf = transforms.Compose([transforms.Resize(256), transforms.RandomCrop(224), transforms.RandomHorizontalFlip(),
                                 transforms.ToTensor(),
                                 transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
        root = os.path.join(a.data, "train") if os.path.isdir(os.path.join(a.data, "train")) else a.data
        dl = torch.utils.data.DataLoader(datasets.ImageFolder(root, tf), batch_size=a.batch, shuffle=True,
                                         num_workers=a.workers, drop_last=True, persistent_workers=a.workers > 0)
        it = iter(dl)

        def batch():
            nonlocal it
            try:
                return next(it)
            except StopIteration:
                it = iter(dl)
                return next(it)
    else:
        x, y = torch.rand(a.batch, 3, 224, 224), torch.arange(a.batch) % 1000

        def batch():
            return x, y
    wait = 0.0
    for k in range(a.steps + 2):
        if k == 2:
            t0, wait = time.perf_counter(), 0.0
        tw = time.perf_counter()
        xb, yb = batch()
        wait += time.perf_counter() - tw
        opt.zero_grad(set_to_none=True)
        lossf(model(xb), yb).backward()
        opt.step()
    s = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if a.data and a.workers:
        rss += a.workers * resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"model": a.model, "batch": a.batch, "threads": a.threads, "images_per_s": round(a.batch * a.steps / s, 3),
                      "peak_rss_mb": round(rss, 1), "data_wait_share": round(wait / s, 5)}))


if __name__ == "__main__":
    main()
