"""shoal's network engine from Python: shoal.Net (a network built from a .cfg, forward and
backward on numpy arrays, its parameters and gradients as named numpy views of shoal's own
memory, weight files) and shoal.train (the job `shoal train` runs, its report as a dict).
Not here: the C side (python/_shoal_net.c), the PyTorch model of a cfg (_to_torch.py).
Proved by tests/python/test_net.py and test_train.py."""
import warnings

import numpy as np

from . import _shoal

_SLOW_KERNELS = ("prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "katmai", "coppermine",
                 "northwood", "banias")
_warned = []


def _check_blas():
    """Say once when OpenBLAS runs far below this CPU: it was opened before shoal was imported
    (numpy first) without OPENBLAS_CORETYPE, and did not recognise the CPU."""
    if _warned:
        return
    _warned.append(1)
    name, avx2 = _shoal._blas_kernels()
    if name and avx2 and name.strip().lower() in _SLOW_KERNELS:
        warnings.warn("shoal: OpenBLAS runs its %s kernels on this AVX2 CPU (it was loaded before shoal "
                      "could set OPENBLAS_CORETYPE): import shoal before numpy and torch, or set "
                      "OPENBLAS_CORETYPE=Haswell (SkylakeX with AVX-512)" % name.strip(), RuntimeWarning, stacklevel=3)

SHORT = {"convolutional": "conv", "connected": "connected", "maxpool": "maxpool", "avgpool": "avgpool",
         "dropout": "dropout", "softmax": "softmax", "cost": "cost", "shortcut": "shortcut",
         "route": "route", "reorg": "reorg", "crop": "crop", "rnn": "rnn", "gru": "gru", "lstm": "lstm",
         "crnn": "crnn"}


class Net:
    """Net(cfg, batch=0, seed=1, threads=0): the network of a Darknet-style .cfg, built by
    shoal's C engine. batch: images a forward may take (0: the cfg's); seed: the initial
    weights and dropout; threads: kernel threads (0: SHOAL_THREADS, else this process's CPUs).

        net = shoal.Net("examples/lenet.cfg", batch=64)
        probs = net.forward(x, training=True)      # x: (n, C, H, W) float32
        loss = net.backward(labels)                # gradients of the mean cross-entropy
        for name, p in net.parameters().items():   # views of shoal's memory: no copies
            p -= 0.01 * net.gradients()[name]
    """

    def __init__(self, cfg, batch=0, seed=1, threads=0):
        self._net = _shoal.Net(cfg, batch, seed, threads)
        _check_blas()
        self.cfg = cfg
        s = self._net.shape
        self.batch, self.input_shape, self.classes = s["batch"], (s["c"], s["h"], s["w"]), s["k"]
        self.layers = [self._net.layer(i) for i in range(s["nlayers"])]
        for i, l in enumerate(self.layers):
            l["name"] = "%s%d" % (SHORT.get(l["type"], l["type"]), i)
        self._params = self._named(self._net.block("params"))
        self._grads = self._named(self._net.block("grads"))
        self._stats = self._named_stats(np.asarray(self._net.block("stats")))

    def _named(self, view):
        """Each layer's weights, biases and scales as views into a block, shaped as Darknet
        lays them out: convolutional (F, C/G, S, S), connected (K, I), recurrent flat."""
        block = np.asarray(view)
        out = {}
        for l in self.layers:
            off, n = l["weights"]
            if n:
                w = block[off:off + n]
                if l["type"] == "convolutional":
                    w = w.reshape(l["filters"], -1, l["size"], l["size"])
                elif l["type"] == "connected":
                    w = w.reshape(l["out"][0], -1)
                out[l["name"] + ".weights"] = w
            for part in ("biases", "scales"):
                off, n = l[part]
                if n:
                    out[l["name"] + "." + part] = block[off:off + n]
        return out

    def _named_stats(self, block):
        out = {}
        for l in self.layers:
            off, n = l["stats"]
            if n:
                out[l["name"] + ".rolling_mean"] = block[off:off + n // 2]
                out[l["name"] + ".rolling_variance"] = block[off + n // 2:off + n]
        return out

    def _input(self, x):
        x = np.ascontiguousarray(x, dtype=np.float32)
        per = self.input_shape[0] * self.input_shape[1] * self.input_shape[2]
        if x.size % per:
            raise ValueError("forward: x has %d values, not a whole number of %s inputs" % (x.size, self.input_shape))
        return x, x.size // per

    def forward(self, x, training=False):
        """forward(x, training=False) -> (n, K) float32 array (a copy): the softmax output, or
        the last layer's when the net has none. x: n inputs of the cfg's shape, n <= batch
        (any float array; a C-contiguous float32 one is read in place). training=True uses
        batch statistics and dropout and keeps what backward needs."""
        x, n = self._input(x)
        out = self._net.forward(x, n, bool(training))
        return np.asarray(out).reshape(n, self.classes).copy()

    def backward(self, labels):
        """backward(labels) -> the mean cross-entropy of the last (training) forward against
        labels (n class indices); d(loss)/d(parameters) overwrites gradients()."""
        return self._net.backward(np.ascontiguousarray(labels, dtype=np.int32))

    def parameters(self):
        """{name: array}: views of shoal's parameter block ("conv0.weights", "conv0.biases",
        "connected4.weights", ...). Writing them changes the net's weights."""
        return self._params

    def gradients(self):
        """{name: array}: views of the gradient block, named as parameters()."""
        return self._grads

    def statistics(self):
        """{name: array}: batch norm's rolling means and variances (views)."""
        return self._stats

    def params_block(self):
        """The whole parameter block as one flat float32 view (what an allreduce averages)."""
        return np.asarray(self._net.block("params"))

    def grads_block(self):
        return np.asarray(self._net.block("grads"))

    def state(self):
        """The recurrent state carried between forwards (a view; empty for feed-forward nets)."""
        return np.asarray(self._net.block("state"))

    def reset_state(self):
        self._net.reset_state()

    def load(self, path):
        """Weights and statistics from a shoal checkpoint or a Darknet .weights file."""
        self._net.load(str(path))

    def save(self, path):
        """Weights and statistics to a shoal checkpoint, or Darknet's .weights (path ends so)."""
        self._net.save(str(path))

    def __repr__(self):
        return "<shoal.Net %s: %d layers, input %s, %d classes, batch %d>" % (
            self.cfg, len(self.layers), self.input_shape, self.classes, self.batch)


def train(cfg, data=None, epochs=None, ranks=1, **options):
    """See shoal/_train.py (kept apart: it binds the job's options)."""
    from ._train import train as run
    return run(cfg, data=data, epochs=epochs, ranks=ranks, **options)
