# torch_step.py — PyTorch CPU reference for bench/nn_step.c: images/s of the same training
# step (forward, cross-entropy, backward, SGD) for LeNet and the MLP at a batch size.
#   OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/torch_step.py lenet 64 1
import sys, time, statistics
import torch
import torch.nn as nn

def model(name):
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2, 2), nn.Conv2d(20, 50, 5),
                             nn.MaxPool2d(2, 2), nn.Flatten(), nn.Linear(800, 500), nn.ReLU(),
                             nn.Linear(500, 10)), (1, 28, 28)
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                             nn.ReLU(), nn.Linear(256, 10)), (1, 28, 28)
    raise SystemExit("unknown model " + name)

def main():
    name, batch, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    steps = int(sys.argv[5]) if len(sys.argv) > 5 else 20
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    m, shape = model(name)
    opt = torch.optim.SGD(m.parameters(), lr=1e-4)
    x = torch.rand(batch, *shape)
    y = torch.arange(batch) % 10
    lossf = nn.CrossEntropyLoss()
    rates = []
    for r in range(rounds + 1):
        t0 = time.perf_counter()
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = lossf(m(x), y)
            loss.backward()
            opt.step()
        dt = time.perf_counter() - t0
        if r > 0:
            rates.append(batch * steps / dt)
    print(f"torch {name} batch {batch} threads {threads}: {statistics.median(rates):.0f} images/s "
          f"(median of {rounds} rounds of {steps} steps; min {min(rates):.0f} max {max(rates):.0f})")

if __name__ == "__main__":
    main()
