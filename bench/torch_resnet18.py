# torch_resnet18.py — PyTorch CPU reference for ResNet-18 (examples/resnet18.cfg): time of
# one forward + backward at 224x224, batch 16, median of a few steps after a warm-up.
#   OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/torch_resnet18.py 1
import sys, time, statistics
import torch
import torch.nn as nn

class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return torch.relu(y + (self.proj(x) if self.proj is not None else x))

def resnet18():
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers)

def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    m = resnet18()
    x = torch.rand(16, 3, 224, 224)
    y = torch.arange(16) % 1000
    lossf = nn.CrossEntropyLoss()
    times = []
    for s in range(steps + 1):
        t0 = time.perf_counter()
        m.zero_grad(set_to_none=True)
        lossf(m(x), y).backward()
        if s > 0:
            times.append(time.perf_counter() - t0)
    print(f"torch resnet18 224x224 batch 16 threads {threads}: forward+backward "
          f"{statistics.median(times) * 1000:.0f} ms (median of {steps}; min {min(times) * 1000:.0f})")

if __name__ == "__main__":
    main()
