#!/usr/bin/env python3
"""make_corpus.py — writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/:
small valid inputs (and a few near misses) in each target's input layout (see the comment
at the top of each tests/fuzz/fuzz_<target>.c). Run from the repository root; the output is
checked in, so running it again is needed only when a layout changes. Findings' inputs are
added beside these by hand as crash-<what>.bin (regression seeds), never regenerated."""
import gzip, os, struct

root = "tests/fuzz/corpus"

def put(target, name, data):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def gz(b):  # fixed mtime: the same bytes on every run
    return gzip.compress(b, compresslevel=6, mtime=0)

# ---- cfg: tiny nets, every layer kind, numbers <= 32 so the target builds them
cfgs = {
    "lenet.cfg": """[net]
batch=2
width=12
height=12
channels=1
learning_rate=0.01
momentum=0.9
decay=0.0005
policy=steps
steps=10,20
scales=.1,.1
max_batches=30

[convolutional]
filters=4
size=5
stride=1
pad=0
activation=linear

[maxpool]
size=2
stride=2

[connected]
output=8
activation=relu

[dropout]
probability=.5

[connected]
output=3
activation=linear

[softmax]
""",
    "resnet.cfg": """[net]
batch=2
width=8
height=8
channels=3
policy=poly
power=4
max_batches=20

[convolutional]
batch_normalize=1
filters=4
size=3
stride=1
pad=1
activation=leaky

[convolutional]
batch_normalize=1
filters=4
size=3
stride=1
pad=1
activation=linear

[shortcut]
from=-2
activation=relu

[route]
layers=-1,-3

[avgpool]

[connected]
output=2
activation=linear

[softmax]
""",
    "mlp.cfg": """# a comment
; another
[net]
width=4
height=4
channels=1
policy=constant
[connected]
output=5
activation=logistic
[conn]
output=2
[soft]
""",
    "bad-key.cfg": "[net]\nwidth=4\nheight=4\nchannels=1\n[convolutional]\nfilter=2\n",
}
for name, text in cfgs.items():
    put("cfg", name, text.encode())

# ---- idx: flags | images length u16 | images | labels
def idx_images(count, h, w):
    hdr = struct.pack(">IIII", 0x803, count, h, w)
    return hdr + bytes((i * 7 + p) & 255 for i in range(count) for p in range(h * w))

def idx_labels(count, n):
    return struct.pack(">II", 0x801, count) + bytes((i * 3) % n for i in range(count))

def idx_input(flags, img, lab):
    return bytes([flags]) + struct.pack("<H", len(img)) + img + lab

img, lab = idx_images(4, 3, 2), idx_labels(4, 3)
put("idx", "raw", idx_input(0, img, lab))
put("idx", "gz-by-target", idx_input(3, img, lab))
put("idx", "gz-in-input", idx_input(0, gz(img), gz(lab)))
put("idx", "count-1e9", idx_input(0, struct.pack(">IIII", 0x803, 10**9, 28, 28) + bytes(64), lab))

# ---- cifar: n | first length u16 | first | second; records of 1 label + 3072 pixels
def record(label, seed):
    return bytes([label]) + bytes((seed + p) & 255 for p in range(3072))

one, two = record(3, 1), record(9, 2)
put("cifar", "one-file", bytes([0]) + struct.pack("<H", len(one)) + one)

# ---- checkpoint: mode | file (mode bit 0: the target fixes CRCs; bits 1-2: sections asked)
def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF

def ckpt(sections):
    head = b"SHOALCKP" + struct.pack("<II", 1, len(sections))
    table, body = crc32c(head), head
    for name, data in sections:
        sh = name.encode().ljust(32, b"\0") + struct.pack("<QI", len(data), crc32c(data))
        table = crc32c(sh, table)
        body += sh + data
    return body + struct.pack("<I", table)

meta, params = bytes(range(64)), bytes(range(64))
optim = bytes(128)
put("checkpoint", "meta-only", bytes([0]) + ckpt([("meta", meta)]))
put("checkpoint", "all", bytes([6]) + ckpt([("meta", meta), ("params", params), ("optim", optim),
                                            ("empty", b"")]))
put("checkpoint", "fix-crcs", bytes([7]) + ckpt([("meta", meta), ("params", params),
                                                 ("optim", bytes(1)), ("empty", b"")]))

# ---- store: segments conn | length u16 | bytes; requests len u32 | op | tmo u32 | klen u16 | key | value
def req(op, key, val=b"", tmo=0):
    body = bytes([op]) + struct.pack("<IH", tmo, len(key)) + key.encode() + val
    return struct.pack("<I", len(body)) + body

def seg(conn, b):
    return bytes([conn]) + struct.pack("<H", len(b)) + b

put("store", "set-get-add", seg(0, req(1, "k", b"value")) + seg(0, req(2, "k")) +
    seg(1, req(3, "n", struct.pack("<q", 5))) + seg(1, req(3, "n", struct.pack("<q", -2))))
put("store", "wait-then-set", seg(0, req(2, "later", tmo=1000)) + seg(1, req(1, "later", b"x")) +
    seg(2, req(2, "never", tmo=5)))
put("store", "split-frame", seg(0, req(1, "key", b"abcdef")[:5]) + seg(0, req(1, "key", b"abcdef")[5:]))
put("store", "stranger", seg(3, b"SHOAL1C\0" + bytes(160)) + seg(3, b"GET / HTTP/1.0\r\n"))

# ---- auth: mode | bytes
nonce = bytes(range(32))
put("auth", "check", bytes([0]) + b"SHOAL1S\0" + nonce + b"SHOAL1C\0" + nonce + b"ctx".ljust(96, b"\0") + bytes(32))
put("auth", "hostile-server", bytes([1]) + b"SHOAL1S\0" + nonce + bytes(32))
put("auth", "hostile-client", bytes([2]) + b"SHOAL1C\0" + nonce + b"store".ljust(96, b"\0") + bytes(32))
put("auth", "honest", bytes([3]) + b"job-key".ljust(32, b"\0") + nonce + nonce + b"w/tcp 3->5 coll".ljust(96, b"x"))

# ---- darknet: .weights files for fuzz_darknet.c's nets (0: classifier, 88 floats; 1:
# recurrent, 122 floats; 2: PyTorch-form [gru], refused). Counts from
# sh_darknet_weights_nbytes: change them when the target's cfgs change.
def floats(n, seed):
    return b"".join(struct.pack("<f", ((i * 37 + seed) % 19 - 9) / 10) for i in range(n))
def dn_head(major, minor, seen, seen64=True):
    return struct.pack("<iii", major, minor, 0) + struct.pack("<Q" if seen64 else "<I", seen)
put("darknet", "classifier", bytes([0]) + dn_head(0, 2, 5) + floats(88, 1))
put("darknet", "recurrent", bytes([1]) + dn_head(0, 2, 7) + floats(122, 2))
put("darknet", "old-header", bytes([0]) + dn_head(0, 1, 3, False) + floats(88, 3))
put("darknet", "transposed", bytes([1]) + dn_head(0, 1001, 9, False) + floats(122, 4))
put("darknet", "pytorch-gru", bytes([2]) + dn_head(0, 2, 1) + floats(40, 5))
put("darknet", "short", bytes([0]) + dn_head(0, 2, 5) + floats(30, 6))

# ---- text: mode (bit 0: held-out tail), time steps, streams, world (each mod its range), text
poem = b"the sea is calm tonight.\nthe tide is full, the moon lies fair\nupon the straits;\n" * 3
put("text", "train-3x3", bytes([0, 2, 2, 0]) + poem)
put("text", "tail-1x1", bytes([1, 0, 0, 0]) + poem)
put("text", "two-ranks", bytes([0, 3, 1, 1]) + poem)
put("text", "binary", bytes([0, 1, 3, 0]) + bytes(range(256)))
put("text", "tiny", bytes([0, 0, 0, 0]) + b"abcdefghijklmnopqrst")

# ---- tb: TensorBoard event files (TFRecord framing, masked CRC-32C; Event protobufs)
def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xa282ead8) & 0xffffffff
def pb_key(field, wire):
    return bytes([field << 3 | wire])
def pb_varint(v):
    out = b""
    while True:
        b, v = v & 0x7f, v >> 7
        out += bytes([b | (0x80 if v else 0)])
        if not v:
            return out
def pb_bytes(field, b):
    return pb_key(field, 2) + pb_varint(len(b)) + b
def tb_event(wall, step, values):
    summary = b"".join(pb_bytes(1, pb_bytes(1, tag.encode()) + pb_key(2, 5) + struct.pack("<f", v))
                       for tag, v in values)
    return pb_key(1, 1) + struct.pack("<d", wall) + pb_key(2, 0) + pb_varint(step) + \
        (pb_bytes(5, summary) if values else b"")
def tfrecord(data):
    head = struct.pack("<Q", len(data))
    return head + struct.pack("<I", masked(crc32c(head))) + data + struct.pack("<I", masked(crc32c(data)))
events = tfrecord(pb_key(1, 1) + struct.pack("<d", 1.7e9) + pb_bytes(3, b"brain.Event:2")) + b"".join(
    tfrecord(tb_event(1.7e9 + s, s, [("train/loss", 2.0 / (s + 1)), ("lr", 0.1)])) for s in range(4))
put("tb", "run", bytes([0]) + events)
put("tb", "fix-crcs", bytes([1]) + events[:-7])
put("tb", "bad-crc", bytes([0]) + events[:40] + b"\xff" + events[41:80])

# ---- plot: mode (mod 4: 0 JSON, 1 timeline, 2 benchmark curve, 3 train history) · the file
put("plot", "json", bytes([0]) + b'{"a": [1, -2.5e3, true, null, "x\\u0041\\n"], "b": {"c": {}}, "d": []}')
put("plot", "timeline", bytes([1]) + b'{"traceEvents": ['
    b'{"name": "step", "cat": "step", "ph": "X", "pid": 0, "ts": 0, "dur": 900, "args": {"step": 0}},'
    b'{"name": "forward", "cat": "forward", "ph": "X", "pid": 0, "ts": 1, "dur": 300, "args": {"step": 0}},'
    b'{"name": "step", "cat": "step", "ph": "X", "pid": 1, "ts": 0, "dur": 800, "args": {"step": 1}}]}')
put("plot", "bench-json", bytes([2]) + b'{"op": "allreduce", "ranks": 2, "rows": ['
    b'{"size": 1024, "busbw_gb_s": 1.5}, {"size": 4096, "busbw_gb_s": 3.25}]}')
put("plot", "bench-lines", bytes([2]) + b'[rank 0] {"size": 8, "busbw_gb_s": 0.1}\n{"size": 64, "busbw_gb_s": 0.5}\n')
put("plot", "bench-table", bytes([2]) + b"#  size  count  type  redop  time  algbw  busbw\n"
    b"   1024   256  float  sum  10.0  0.10  0.15\n   4096  1024  float  sum  12.0  0.34  0.51\n")
put("plot", "train-json", bytes([3]) + b'[rank 0] {"history": [{"step": 10, "seconds": 1.5, "epoch": 0.5, '
    b'"train_loss": 2.1, "test_loss": 2.0, "test_accuracy": 0.3}, {"step": 20, "seconds": 3}]}\n')

# ---- image: flags | a picture file (PIL writes them; without PIL this corpus is left as it is)
try:
    import io
    import numpy as np
    from PIL import Image
except ImportError:
    Image = None
if Image is not None:
    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)

    def pic(name, flags, im, **kw):
        b = io.BytesIO()
        im.save(b, **kw)
        put("image", name, bytes([flags]) + b.getvalue())

    pic("baseline.jpg", 0x00, Image.fromarray(a), format="JPEG", quality=80)
    pic("progressive-shrink.jpg", 0x16, Image.fromarray(np.kron(a, np.ones((4, 4, 1), np.uint8))), format="JPEG",
        quality=70, progressive=True)
    pic("grey.jpg", 0x01, Image.fromarray(a[:, :, 0], "L"), format="JPEG")
    pic("cmyk.jpg", 0x30, Image.fromarray(a).convert("CMYK"), format="JPEG")
    pic("rgba.png", 0x10, Image.fromarray(np.concatenate([a, a[:, :, :1]], -1), "RGBA"), format="PNG")
    pic("palette.png", 0x31, Image.fromarray(a).convert("P"), format="PNG", transparency=2)
    pic("onebit.png", 0x00, Image.fromarray(a[:, :, 0] > 100), format="PNG")
    pic("grey16.png", 0x11, Image.fromarray((a[:, :, 0].astype(np.uint16) * 257), "I;16"), format="PNG")
