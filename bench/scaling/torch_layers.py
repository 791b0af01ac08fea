#!/usr/bin/python3
"""torch_layers.py MODEL BATCH THREADS [ITERS=3] — torchvision's MODEL (alexnet, vgg16,
resnet50) one training step at a time under torch.autograd.profiler: the milliseconds an
iteration of each operator (forward and its backward), grouped by input shape so each layer
is its own row, the slowest first; to set beside `shoal time CFG --per-layer` (same batch and
threads; bench/scaling/alexnet-tv.cfg for alexnet). Not a test."""
import sys

import torch
import torch.nn as nn
import torchvision


def main():
    name, batch, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    iters = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = getattr(torchvision.models, name)(num_classes=1000)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    lossf = nn.CrossEntropyLoss()
    x, y = torch.rand(batch, 3, 224, 224), torch.arange(batch) % 1000

    def step():
        opt.zero_grad(set_to_none=True)
        lossf(model(x), y).backward()
        opt.step()

    for _ in range(2):
        step()
    with torch.autograd.profiler.profile(record_shapes=True) as prof:
        for _ in range(iters):
            step()
    rows = [e for e in prof.key_averages(group_by_input_shape=True)
            if not e.key.startswith(("aten::empty", "aten::zero", "aten::fill", "aten::t", "aten::view",
                                     "aten::as_strided", "aten::resize", "aten::expand", "aten::reshape",
                                     "aten::transpose", "aten::permute", "aten::copy_", "aten::select",
                                     "torch::autograd::AccumulateGrad", "aten::detach"))]
    rows.sort(key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in prof.key_averages()) / 1000 / iters
    print(f"torchvision {name}, batch {batch}, {threads} thread(s): {total:.1f} ms a step (self CPU, all ops)")
    print(f"{'ms/step':>9}  {'op':<40} shapes")
    for e in rows[:25]:
        print(f"{e.self_cpu_time_total / 1000 / iters:9.2f}  {e.key[:40]:<40} {str(e.input_shapes)[:70]}")


if __name__ == "__main__":
    main()
