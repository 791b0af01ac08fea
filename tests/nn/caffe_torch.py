# caffe_torch.py — the Caffe side of tests/nn/test_caffe_net.c and test_caffe_model.c, through
# the real protobuf library: src/nn/caffe/caffe.proto compiled by Debian's protoc into a
# temporary directory, python3-protobuf writing and reading .caffemodel files, and PyTorch
# computing each net's forward pass (in double) from the same weights.
#   caffe_torch.py net NAME DIR      write DIR/NAME.prototxt, .caffemodel, input.bin (float32
#                                    N*C*H*W) and expected.bin (float32: logits then softmax)
#   caffe_torch.py read FILE         print each layer's name, type and blobs (shape, sum, sum
#                                    of squares): how Google's decoder reads a shoal-written file
#   caffe_torch.py legacy FILE       write LeNet's weights (tests/nn: lenet) with V1 layers and
#                                    4-D num/channels/height/width shapes, as Caffe's first files
# NAME: lenet, caffenet_small (CaffeNet's layers at 1/8 width, 99x99), caffenet (the whole,
# 227x227: bench/caffe only), zoo (BatchNorm+Scale, Eltwise, Concat, Sigmoid, TanH, LRN, ceil
# and padded pooling, global AVE, group convolution, leaky ReLU).
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "src", "nn", "caffe")


def caffe_pb2():
    out = tempfile.mkdtemp(prefix="shoal_caffe_pb_")
    subprocess.run(["protoc", "--proto_path=" + PROTO, "--python_out=" + out, "caffe.proto"], check=True)
    sys.path.insert(0, out)
    import caffe_pb2 as pb  # noqa: E402 (compiled just above)
    return pb


class Net:
    """A net written twice: as Caffe prototxt text and as PyTorch ops on the same weights."""

    def __init__(self, name, n, c, h, w, seed):
        self.name, self.rng = name, np.random.default_rng(seed)
        self.text = ['name: "%s"' % name,
                     'layer { name: "data" type: "Input" top: "data" '
                     'input_param { shape { dim: %d dim: %d dim: %d dim: %d } } }' % (n, c, h, w)]
        self.blobs = []  # (layer name, type, bottom, top, [arrays])
        self.ops = []    # functions of a dict of torch tensors by blob name
        self.shape = {"data": (c, h, w)}
        self.x = self.rng.uniform(-1, 1, size=(n, c, h, w)).astype(np.float32)

    def layer(self, text):
        self.text.append("layer { %s }" % text)

    def conv(self, name, bottom, top, f, k, s=1, p=0, g=1, bias=True):
        c, h, w = self.shape[bottom]
        wt = self.rng.normal(0, (1.0 / (c // g * k * k)) ** 0.5, size=(f, c // g, k, k)).astype(np.float32)
        arrays = [wt]
        if bias:
            arrays.append(self.rng.normal(0, 0.1, size=f).astype(np.float32))
        self.layer('name: "%s" type: "Convolution" bottom: "%s" top: "%s" convolution_param { num_output: %d '
                   'kernel_size: %d stride: %d pad: %d group: %d bias_term: %s }'
                   % (name, bottom, top, f, k, s, p, g, "true" if bias else "false"))
        self.blobs.append((name, "Convolution", bottom, top, arrays))
        import torch.nn.functional as F

        def op(t, a=arrays):
            b = self.t(a[1]) if len(a) > 1 else None
            t[top] = F.conv2d(t[bottom], self.t(a[0]), b, stride=s, padding=p, groups=g)
        self.ops.append(op)
        self.shape[top] = (f, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1)

    def ip(self, name, bottom, top, k):
        c, h, w = self.shape[bottom]
        i = c * h * w
        arrays = [self.rng.normal(0, (1.0 / i) ** 0.5, size=(k, i)).astype(np.float32),
                  self.rng.normal(0, 0.1, size=k).astype(np.float32)]
        self.layer('name: "%s" type: "InnerProduct" bottom: "%s" top: "%s" inner_product_param { num_output: %d }'
                   % (name, bottom, top, k))
        self.blobs.append((name, "InnerProduct", bottom, top, arrays))

        def op(t, a=arrays):
            t[top] = t[bottom].reshape(t[bottom].shape[0], -1) @ self.t(a[0]).T + self.t(a[1])
        self.ops.append(op)
        self.shape[top] = (k, 1, 1)

    def pool(self, name, bottom, top, method, k, s, p=0, glob=False):
        import math

        import torch.nn.functional as F
        c, h, w = self.shape[bottom]
        if glob:
            self.layer('name: "%s" type: "Pooling" bottom: "%s" top: "%s" pooling_param { pool: %s global_pooling: '
                       'true }' % (name, bottom, top, method))
            self.ops.append(lambda t: t.__setitem__(top, t[bottom].mean(dim=(2, 3), keepdim=True)))
            self.shape[top] = (c, 1, 1)
            return
        self.layer('name: "%s" type: "Pooling" bottom: "%s" top: "%s" pooling_param { pool: %s kernel_size: %d '
                   'stride: %d pad: %d }' % (name, bottom, top, method, k, s, p))
        self.ops.append(lambda t: t.__setitem__(top, F.max_pool2d(t[bottom], k, s, p, ceil_mode=True)))

        def out(n):
            o = int(math.ceil((n + 2 * p - k) / s)) + 1
            return o - 1 if p > 0 and (o - 1) * s >= n + p else o
        self.shape[top] = (c, out(h), out(w))

    def act(self, name, kind, blob, slope=0.0):
        import torch
        extra = " relu_param { negative_slope: %g }" % slope if slope else ""
        self.layer('name: "%s" type: "%s" bottom: "%s" top: "%s"%s' % (name, kind, blob, blob, extra))
        f = {"ReLU": lambda v: torch.nn.functional.leaky_relu(v, slope), "Sigmoid": torch.sigmoid,
             "TanH": torch.tanh}[kind]
        self.ops.append(lambda t: t.__setitem__(blob, f(t[blob])))

    def lrn(self, name, bottom, top, size, alpha, beta, k):
        import torch
        self.layer('name: "%s" type: "LRN" bottom: "%s" top: "%s" lrn_param { local_size: %d alpha: %g beta: %g '
                   'k: %g }' % (name, bottom, top, size, alpha, beta, k))
        m = torch.nn.LocalResponseNorm(size, alpha=alpha, beta=beta, k=k)
        self.ops.append(lambda t: t.__setitem__(top, m(t[bottom])))
        self.shape[top] = self.shape[bottom]

    def bn_scale(self, name, blob, conv_bias=None):
        c = self.shape[blob][0]
        sf = np.array([self.rng.uniform(0.5, 3.0)], dtype=np.float32)
        mean = (self.rng.normal(0, 0.3, size=c) * sf).astype(np.float32)
        var = (self.rng.uniform(0.5, 2.0, size=c) * sf).astype(np.float32)
        gamma = self.rng.uniform(0.5, 1.5, size=c).astype(np.float32)
        beta = self.rng.normal(0, 0.2, size=c).astype(np.float32)
        self.layer('name: "%s_bn" type: "BatchNorm" bottom: "%s" top: "%s" param { lr_mult: 0 } param { lr_mult: 0 } '
                   'param { lr_mult: 0 }' % (name, blob, blob))
        self.layer('name: "%s_scale" type: "Scale" bottom: "%s" top: "%s" scale_param { bias_term: true }'
                   % (name, blob, blob))
        self.blobs.append((name + "_bn", "BatchNorm", blob, blob, [mean, var, sf]))
        self.blobs.append((name + "_scale", "Scale", blob, blob, [gamma, beta]))

        def op(t):
            k = 1.0 / float(sf[0])
            m, v = self.t(mean) * k, self.t(var) * k
            y = (t[blob] - m[None, :, None, None]) / (v[None, :, None, None] + 1e-5).sqrt()
            t[blob] = y * self.t(gamma)[None, :, None, None] + self.t(beta)[None, :, None, None]
        self.ops.append(op)

    def eltwise(self, name, bottoms, top):
        self.layer('name: "%s" type: "Eltwise" %s top: "%s" eltwise_param { operation: SUM }'
                   % (name, " ".join('bottom: "%s"' % b for b in bottoms), top))
        self.ops.append(lambda t: t.__setitem__(top, sum(t[b] for b in bottoms)))
        self.shape[top] = self.shape[bottoms[0]]

    def concat(self, name, bottoms, top):
        import torch
        self.layer('name: "%s" type: "Concat" %s top: "%s"' % (name, " ".join('bottom: "%s"' % b for b in bottoms), top))
        self.ops.append(lambda t: t.__setitem__(top, torch.cat([t[b] for b in bottoms], dim=1)))
        c = sum(self.shape[b][0] for b in bottoms)
        self.shape[top] = (c,) + self.shape[bottoms[0]][1:]

    def dropout(self, name, blob):
        self.layer('name: "%s" type: "Dropout" bottom: "%s" top: "%s" dropout_param { dropout_ratio: 0.5 }'
                   % (name, blob, blob))

    def softmax(self, bottom):
        self.layer('name: "prob" type: "Softmax" bottom: "%s" top: "prob"' % bottom)
        self.logits = bottom

    def t(self, a):
        import torch
        return torch.tensor(a, dtype=torch.float64)

    def forward(self):
        import torch
        t = {"data": self.t(self.x)}
        for op in self.ops:
            op(t)
        logits = t[self.logits].reshape(self.x.shape[0], -1)
        return logits.numpy(), torch.softmax(logits, dim=1).numpy()

    def save(self, pb, directory):
        with open(os.path.join(directory, self.name + ".prototxt"), "w") as f:
            f.write("\n".join(self.text) + "\n")
        write_model(pb, os.path.join(directory, self.name + ".caffemodel"), self.name, self.blobs)
        self.x.tofile(os.path.join(directory, "input.bin"))
        logits, prob = self.forward()
        np.concatenate([logits.ravel(), prob.ravel()]).astype(np.float32).tofile(os.path.join(directory, "expected.bin"))


def write_model(pb, path, name, blobs, legacy=False):
    net = pb.NetParameter()
    net.name = name
    for lname, ltype, bottom, top, arrays in blobs:
        layer = net.layers.add() if legacy else net.layer.add()
        layer.name = lname
        if not legacy:
            layer.type = ltype
        layer.bottom.append(bottom)
        layer.top.append(top)
        for a in arrays:
            b = layer.blobs.add()
            if legacy:  # Caffe's first files: 4-D, leading ones
                dims = [1] * (4 - a.ndim) + list(a.shape)
                b.num, b.channels, b.height, b.width = dims
            else:
                b.shape.dim.extend(a.shape)
            b.data.extend(a.ravel().tolist())
    with open(path, "wb") as f:
        f.write(net.SerializeToString())


def lenet(seed=1, n=3):
    net = Net("lenet", n, 1, 28, 28, seed)
    net.conv("conv1", "data", "conv1", 20, 5)
    net.pool("pool1", "conv1", "pool1", "MAX", 2, 2)
    net.conv("conv2", "pool1", "conv2", 50, 5)
    net.pool("pool2", "conv2", "pool2", "MAX", 2, 2)
    net.ip("ip1", "pool2", "ip1", 500)
    net.act("relu1", "ReLU", "ip1")
    net.ip("ip2", "ip1", "ip2", 10)
    net.softmax("ip2")
    return net


def caffenet(width_div=1, size=227, n=2, seed=2):
    d = width_div
    net = Net("caffenet" if d == 1 else "caffenet_small", n, 3, size, size, seed)
    net.conv("conv1", "data", "conv1", 96 // d, 11, s=4)
    net.act("relu1", "ReLU", "conv1")
    net.pool("pool1", "conv1", "pool1", "MAX", 3, 2)
    net.lrn("norm1", "pool1", "norm1", 5, 0.0001, 0.75, 1.0)
    net.conv("conv2", "norm1", "conv2", 256 // d, 5, p=2, g=2)
    net.act("relu2", "ReLU", "conv2")
    net.pool("pool2", "conv2", "pool2", "MAX", 3, 2)
    net.lrn("norm2", "pool2", "norm2", 5, 0.0001, 0.75, 1.0)
    net.conv("conv3", "norm2", "conv3", 384 // d, 3, p=1)
    net.act("relu3", "ReLU", "conv3")
    net.conv("conv4", "conv3", "conv4", 384 // d, 3, p=1, g=2)
    net.act("relu4", "ReLU", "conv4")
    net.conv("conv5", "conv4", "conv5", 256 // d, 3, p=1, g=2)
    net.act("relu5", "ReLU", "conv5")
    net.pool("pool5", "conv5", "pool5", "MAX", 3, 2)
    net.ip("fc6", "pool5", "fc6", 4096 // d)
    net.act("relu6", "ReLU", "fc6")
    net.dropout("drop6", "fc6")
    net.ip("fc7", "fc6", "fc7", 4096 // d)
    net.act("relu7", "ReLU", "fc7")
    net.dropout("drop7", "fc7")
    net.ip("fc8", "fc7", "fc8", 1000 // d)
    net.softmax("fc8")
    return net


def zoo(seed=3, n=2):
    net = Net("zoo", n, 3, 17, 17, seed)
    net.conv("c1", "data", "c1", 8, 3, p=1, bias=False)
    net.bn_scale("c1", "c1")
    net.act("r1", "ReLU", "c1")
    net.conv("c2", "c1", "c2", 8, 3, p=1)               # bias before batch norm: folded
    net.bn_scale("c2", "c2")
    net.eltwise("sum", ["c2", "c1"], "sum")
    net.act("r2", "ReLU", "sum", slope=0.1)
    net.pool("p1", "sum", "p1", "MAX", 3, 2, p=1)          # 17 -> 9 with padding
    net.conv("b1", "p1", "b1", 6, 1)
    net.act("s1", "Sigmoid", "b1")
    net.conv("b2", "p1", "b2", 4, 3, p=1, g=2)             # reads p1 again: a route
    net.act("t2", "TanH", "b2")
    net.concat("cat", ["b1", "b2"], "cat")
    net.lrn("norm", "cat", "norm", 3, 0.5, 0.75, 2.0)
    net.pool("p2", "norm", "p2", "MAX", 2, 2)              # 9 -> 5: ceil
    net.pool("gap", "p2", "gap", "AVE", 0, 0, glob=True)
    net.ip("fc", "gap", "fc", 7)
    net.softmax("fc")
    return net


def read(pb, path):
    net = pb.NetParameter()
    with open(path, "rb") as f:
        net.ParseFromString(f.read())
    print("net %s layers %d" % (net.name, len(net.layer)))
    for layer in net.layer:
        for i, b in enumerate(layer.blobs):
            a = np.array(b.data, dtype=np.float64)
            print("%s %s %d %s %.9g %.9g" % (layer.name, layer.type, i, "x".join(str(d) for d in b.shape.dim),
                                           a.sum(), (a * a).sum()))


def main():
    pb = caffe_pb2()
    if sys.argv[1] == "net":
        name, directory = sys.argv[2], sys.argv[3]
        net = {"lenet": lenet, "zoo": zoo, "caffenet_small": lambda: caffenet(8, 99),
               "caffenet": lambda: caffenet(1, 227)}[name]()
        net.save(pb, directory)
    elif sys.argv[1] == "read":
        read(pb, sys.argv[2])
    elif sys.argv[1] == "legacy":
        net = lenet()
        write_model(pb, sys.argv[2], "lenet", net.blobs, legacy=True)
        print("ok")


if __name__ == "__main__":
    main()
