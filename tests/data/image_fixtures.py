#!/usr/bin/python3
"""image_fixtures.py DIR — the reference half of tests/data/test_image_decode.c: writes pictures
of every format and oddity shoal decodes into DIR, each beside the pixels it must decode to
(NAME.ref: raw bytes, rows of W*C) as PIL reads it, or as the PNG standard defines it where PIL
does not (16-bit samples, interlacing), and DIR/manifest lines
  FILE C W H TOLERANCE REF   (a picture and its expected pixels as C channels)
  FILE C bad                 (a damaged file that must be refused)
"""
import io
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image

rng = np.random.default_rng(7)
out = sys.argv[1]
lines = []


def smooth(h, w, c):
    """A picture JPEG keeps well: gradients and a few edges, plus mild noise."""
    y, x = np.mgrid[0:h, 0:w]
    chans = [(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 3) % 256]
    a = np.stack(chans[:c], axis=-1).astype(np.int32)
    a += rng.integers(-6, 7, size=a.shape)
    return np.clip(a, 0, 255).astype(np.uint8)


def ref(name, pix, c, tol):
    pix = np.ascontiguousarray(pix, dtype=np.uint8)
    h, w = pix.shape[:2]
    pix.reshape(h, w * c).tofile(os.path.join(out, name + f".c{c}.ref"))
    lines.append(f"{name} {c} {w} {h} {tol} {name}.c{c}.ref")


def pil_ref(name, c, tol, draft=None):
    im = Image.open(os.path.join(out, name))
    if draft:
        im.draft("RGB" if c == 3 else "L", draft)
    im = im.convert("RGB" if c == 3 else "L")
    a = np.asarray(im)
    ref(name, a.reshape(a.shape[0], a.shape[1], c), c, tol)


def save(name, im, **kw):
    im.save(os.path.join(out, name), **kw)


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def write_png(name, rows_fn, w, h, depth, ctype, interlace):
    """A PNG by hand (PIL writes neither 16-bit RGB nor Adam7): rows_fn(xs, ys) -> raw row bytes."""
    raw = b""
    if interlace:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
        for x0, y0, dx, dy in passes:
            xs, ys = list(range(x0, w, dx)), list(range(y0, h, dy))
            if xs and ys:
                for yy in ys:
                    raw += b"\0" + rows_fn(xs, yy)
    else:
        for yy in range(h):
            raw += b"\0" + rows_fn(list(range(w)), yy)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    open(os.path.join(out, name), "wb").write(data)


# --- PNG: every colour type PIL writes, each read as grey and as RGB -----------------------
rgb = smooth(23, 37, 3)
save("rgb.png", Image.fromarray(rgb))
grey = smooth(29, 31, 1)[:, :, 0]
save("grey.png", Image.fromarray(grey, "L"))
rgba = np.concatenate([smooth(17, 19, 3), rng.integers(0, 256, (17, 19, 1), dtype=np.uint8)], axis=-1)
save("rgba.png", Image.fromarray(rgba, "RGBA"))
pal = Image.fromarray(smooth(21, 13, 3)).convert("P", palette=Image.Palette.ADAPTIVE, colors=37)
save("palette.png", pal)
save("palette_trns.png", pal, transparency=3)
save("onebit.png", Image.fromarray(smooth(9, 27, 1)[:, :, 0] > 128))
save("la.png", Image.fromarray(np.stack([grey, 255 - grey], -1), "LA"))
save("tiny.png", Image.fromarray(np.array([[[9, 200, 77]]], np.uint8)))
for n in ["rgb.png", "grey.png", "rgba.png", "palette.png", "palette_trns.png", "onebit.png", "la.png", "tiny.png"]:
    pil_ref(n, 3, 0)
    pil_ref(n, 1, 0)

# 16-bit: the standard's scaling to 8 bits, v * 255 / 65535 rounded (PIL clips instead)
g16 = rng.integers(0, 65536, (11, 15), dtype=np.uint16)
write_png("grey16.png", lambda xs, yy: b"".join(struct.pack(">H", int(g16[yy, x])) for x in xs), 15, 11, 16, 0, 0)
ref("grey16.png", np.rint(g16.astype(np.float64) * 255 / 65535)[:, :, None], 1, 0)
ref("grey16.png", np.repeat(np.rint(g16.astype(np.float64) * 255 / 65535)[:, :, None], 3, -1), 3, 0)
c16 = rng.integers(0, 65536, (10, 7, 3), dtype=np.uint16)
write_png("rgb16.png", lambda xs, yy: b"".join(struct.pack(">3H", *map(int, c16[yy, x])) for x in xs), 7, 10, 16, 2, 0)
c8 = np.rint(c16.astype(np.float64) * 255 / 65535).astype(np.int64)
ref("rgb16.png", c8, 3, 0)
luma = (19595 * c8[..., 0] + 38470 * c8[..., 1] + 7471 * c8[..., 2] + 32768) >> 16
ref("rgb16.png", luma[:, :, None], 1, 0)
# Adam7 interlaced RGB
ia = smooth(19, 21, 3)
write_png("interlaced.png", lambda xs, yy: bytes(ia[yy, xs].reshape(-1)), 21, 19, 8, 2, 1)
ref("interlaced.png", ia, 3, 0)

# --- JPEG: PIL decodes with the same libjpeg-turbo, so pixels agree to the bit -------------
big = smooth(96, 128, 3)
save("baseline.jpg", Image.fromarray(big), quality=90)
save("progressive.jpg", Image.fromarray(big), quality=85, progressive=True)
save("grey.jpg", Image.fromarray(big[:, :, 1], "L"), quality=90)
save("cmyk.jpg", Image.fromarray(big).convert("CMYK"), quality=90)
save("odd.jpg", Image.fromarray(smooth(13, 41, 3)), quality=95, subsampling=2)
for n in ["baseline.jpg", "progressive.jpg", "grey.jpg", "odd.jpg"]:
    pil_ref(n, 3, 1)
# grey from colour: libjpeg's Y channel alone, as PIL's draft("L") decodes it
pil_ref("baseline.jpg", 1, 0, draft=(128, 96))
pil_ref("grey.jpg", 1, 0)
# CMYK: PIL reads Adobe's inverted CMYK as shoal does; its own CMYK -> RGB rounds down
pil_ref("cmyk.jpg", 3, 2)
# DCT scaling: half the size, as PIL's draft picks it
save("scaled.jpg", Image.fromarray(smooth(200, 300, 3)), quality=90)
pil_ref("scaled.jpg", 3, 1, draft=(150, 100))

# --- damaged files -------------------------------------------------------------------------
whole = open(os.path.join(out, "baseline.jpg"), "rb").read()
open(os.path.join(out, "truncated.jpg"), "wb").write(whole[: len(whole) // 2])
open(os.path.join(out, "header_only.jpg"), "wb").write(whole[:200])
png = open(os.path.join(out, "rgb.png"), "rb").read()
open(os.path.join(out, "truncated.png"), "wb").write(png[: len(png) * 2 // 3])
bad = bytearray(png)
at = png.index(b"IDAT") + 20
bad[at] ^= 0x55
open(os.path.join(out, "crc.png"), "wb").write(bytes(bad))
open(os.path.join(out, "text.jpg"), "wb").write(b"this is not a picture\n" * 10)
open(os.path.join(out, "empty.png"), "wb").write(b"")
gif = io.BytesIO()
Image.fromarray(rgb).save(gif, format="GIF")
open(os.path.join(out, "gif.png"), "wb").write(gif.getvalue())
for n in ["truncated.jpg", "header_only.jpg", "truncated.png", "crc.png", "text.jpg", "empty.png", "gif.png"]:
    lines.append(f"{n} 3 bad")


def claim_size(src, dst, marker, w, h):
    """A JPEG whose frame header claims w x h: what a damaged header looks like."""
    b = bytearray(open(os.path.join(out, src), "rb").read())
    at = b.index(marker) + 5
    b[at:at + 4] = struct.pack(">HH", h, w)
    open(os.path.join(out, dst), "wb").write(bytes(b))


claim_size("baseline.jpg", "claims_30000.jpg", b"\xff\xc0", 30000, 30000)
claim_size("progressive.jpg", "claims_16000.jpg", b"\xff\xc2", 16000, 16000)
claim_size("baseline.jpg", "claims_10000.jpg", b"\xff\xc0", 10000, 10000)

open(os.path.join(out, "manifest"), "w").write("\n".join(lines) + "\n")
