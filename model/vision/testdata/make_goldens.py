#!/usr/bin/python3
"""Regenerates the Pillow goldens in this folder (not run by the build or CI).

Needs Pillow (Debian 12: apt-get install python3-pil, Pillow 9.4.0, which links the system
libjpeg-turbo 2.1.5 that our decoder uses too). Run from this folder:
    /usr/bin/python3 make_goldens.py
It writes
  * decode/*.png, decode/*.jpg: small encoded inputs (PNGs written by the tiny encoder below so
    that every colour type / bit depth / interlace combination exists), and decode/*.rgb: what
    Pillow's Image.open(f).convert("RGB") returns for each (raw RGB bytes);
  * goldens.json: SHA-256 digests of Pillow outputs for bicubic resizes, ImageOps.pad and the
    reference's whole fit (plan + pad) on synthetic images, plus the plans themselves.
Synthetic images come from SyntheticPixel(), mirrored in C++ by the test (vision_test_util.cc).
"""
import hashlib, json, math, os, struct, zlib
from PIL import Image, ImageOps

# ---------------------------------------------------------------- synthetic images

def synthetic_pixel(x, y, c, w, h):
    if ((x >> 3) + (y >> 3)) % 3 == 0:  # noise blocks: exercise the clamps
        v = ((x * 2654435761) & 0xFFFFFFFF) ^ ((y * 40503) & 0xFFFFFFFF) ^ (c * 97)
        return (v >> 7) & 0xFF
    if c == 0:
        return x * 255 // max(w - 1, 1)
    if c == 1:
        return y * 255 // max(h - 1, 1)
    return ((x + 2 * y) * 5) & 0xFF

def synthetic(w, h):
    data = bytes(synthetic_pixel(x, y, c, w, h) for y in range(h) for x in range(w) for c in range(3))
    return Image.frombytes("RGB", (w, h), data)

def sha(img):
    assert img.mode == "RGB"
    return hashlib.sha256(img.tobytes()).hexdigest()

# ---------------------------------------------------------------- a minimal PNG encoder

def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

def pack_row(samples, depth):
    if depth == 8:
        return bytes(samples)
    if depth == 16:
        return b"".join(struct.pack(">H", s) for s in samples)
    out, acc, nbits = bytearray(), 0, 0
    for s in samples:
        acc = (acc << depth) | s
        nbits += depth
        if nbits == 8:
            out.append(acc); acc, nbits = 0, 0
    if nbits:
        out.append(acc << (8 - nbits))
    return bytes(out)

ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]

def encode_png(w, h, color_type, depth, rows, plte=None, trns=None, interlace=False):
    """rows[y][x] is a tuple of samples for pixel (x, y)."""
    raw = bytearray()
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    for (x0, y0, dx, dy) in passes:
        xs = list(range(x0, w, dx))
        if not xs:
            continue
        for y in range(y0, h, dy):
            raw.append(0)
            raw += pack_row([s for x in xs for s in rows[y][x]], depth)
    out = b"\x89PNG\r\n\x1a\n"
    out += chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 1 if interlace else 0))
    if plte is not None:
        out += chunk(b"PLTE", bytes(v for rgb in plte for v in rgb))
    if trns is not None:
        out += chunk(b"tRNS", trns)
    out += chunk(b"IDAT", zlib.compress(bytes(raw), 9))
    out += chunk(b"IEND", b"")
    return out

def png_cases():
    w, h = 13, 7
    def px(x, y, k):  # deterministic sample in [0, 2^16)
        return ((x * 7919 + y * 104729 + k * 1299709) * 2654435761 >> 5) & 0xFFFF
    cases = {}
    for depth in (1, 2, 4, 8, 16):
        m = (1 << depth) - 1
        rows = [[(px(x, y, 0) & m,) for x in range(w)] for y in range(h)]
        if depth == 16:  # include small values (kept) and large ones (clamped to 255 by PIL)
            rows = [[((px(x, y, 0) & 0x1FF) if (x + y) % 2 else px(x, y, 0),) for x in range(w)] for y in range(h)]
        cases[f"gray{depth}"] = encode_png(w, h, 0, depth, rows)
    rows8 = [[(px(x, y, 0) & 255,) for x in range(w)] for y in range(h)]
    cases["gray8_trns"] = encode_png(w, h, 0, 8, rows8, trns=struct.pack(">H", rows8[0][0][0]))
    for depth in (8, 16):
        m = (1 << depth) - 1
        ga = [[(px(x, y, 0) & m, px(x, y, 1) & m) for x in range(w)] for y in range(h)]
        cases[f"gray_alpha{depth}"] = encode_png(w, h, 4, depth, ga)
        rgb = [[tuple(px(x, y, k) & m for k in range(3)) for x in range(w)] for y in range(h)]
        cases[f"rgb{depth}"] = encode_png(w, h, 2, depth, rgb)
        rgba = [[tuple(px(x, y, k) & m for k in range(4)) for x in range(w)] for y in range(h)]
        cases[f"rgba{depth}"] = encode_png(w, h, 6, depth, rgba)
        cases[f"rgba{depth}_interlaced"] = encode_png(w, h, 6, depth, rgba, interlace=True)
    rgb8 = [[tuple(px(x, y, k) & 255 for k in range(3)) for x in range(w)] for y in range(h)]
    cases["rgb8_trns"] = encode_png(w, h, 2, 8, rgb8, trns=struct.pack(">HHH", *rgb8[1][1]))
    cases["gray8_interlaced"] = encode_png(w, h, 0, 8, rows8, interlace=True)
    for depth in (1, 2, 4, 8):
        n = 1 << depth
        plte = [((i * 37) & 255, (i * 91 + 11) & 255, (255 - i * 13) & 255) for i in range(n)]
        idx = [[(px(x, y, 2) % n,) for x in range(w)] for y in range(h)]
        cases[f"palette{depth}"] = encode_png(w, h, 3, depth, idx, plte=plte)
    n = 16
    plte = [((i * 37) & 255, (i * 91 + 11) & 255, (255 - i * 13) & 255) for i in range(n)]
    idx = [[(px(x, y, 2) % n,) for x in range(w)] for y in range(h)]
    cases["palette8_trns"] = encode_png(w, h, 3, 8, idx, plte=plte, trns=bytes(range(0, 160, 10)))
    cases["palette4_trns_interlaced"] = encode_png(w, h, 3, 4, idx, plte=plte, trns=bytes([0, 128, 255]), interlace=True)
    return cases

def write_decode_goldens(manifest):
    os.makedirs("decode", exist_ok=True)
    entries = []
    for name, data in png_cases().items():
        path = f"decode/{name}.png"
        open(path, "wb").write(data)
        entries.append(path)
    src = synthetic(23, 17)
    jpeg_cases = {
        "baseline420": dict(img=src, quality=85),
        "baseline444": dict(img=src, quality=95, subsampling=0),
        "progressive": dict(img=src, quality=80, progressive=True),
        "optimized422": dict(img=src, quality=75, subsampling=1, optimize=True),
        "gray": dict(img=src.convert("L"), quality=90),
        "cmyk": dict(img=src.convert("CMYK"), quality=90),
        "gray_progressive": dict(img=src.convert("L"), quality=70, progressive=True),
    }
    for name, kw in jpeg_cases.items():
        img = kw.pop("img")
        path = f"decode/{name}.jpg"
        img.save(path, "JPEG", **kw)
        entries.append(path)
    manifest["decode"] = []
    for path in entries:
        with Image.open(path) as im:
            mode = im.mode
            rgb = im.convert("RGB")
        out = path.rsplit(".", 1)[0] + ".rgb"
        open(out, "wb").write(rgb.tobytes())
        manifest["decode"].append(dict(file=path, pil_mode=mode, width=rgb.width, height=rgb.height,
                                       expected=out))

# ---------------------------------------------------------------- resize / pad / plan

def resize_goldens(manifest):
    cases = [((2, 2), (4, 4)), ((7, 5), (13, 11)), ((40, 30), (9, 7)), ((50, 20), (50, 33)),
             ((33, 17), (20, 17)), ((64, 48), (37, 100)), ((300, 7), (17, 5)), ((5, 300), (3, 41)),
             ((98, 64), (673, 439)), ((1, 1), (3, 2))]
    manifest["resize"] = []
    for (iw, ih), (ow, oh) in cases:
        out = synthetic(iw, ih).resize((ow, oh), Image.Resampling.BICUBIC)
        manifest["resize"].append(dict(**{"in": [iw, ih], "out": [ow, oh]}, sha256=sha(out)))

def pad_goldens(manifest):
    cases = [((10, 40), (42, 140)), ((5, 3), (14, 14)), ((20, 9), (28, 14)), ((3000, 20), (2562, 42)),
             ((1, 1000), (42, 1302)), ((1000, 500), (420, 210)), ((64, 64), (70, 70)), ((98, 64), (98, 70)),
             ((17, 10), (42, 28)), ((9, 40), (28, 126))]
    manifest["pad"] = []
    for (iw, ih), (ow, oh) in cases:
        out = ImageOps.pad(synthetic(iw, ih), (ow, oh), color=(127, 127, 127))
        fit = ImageOps.contain(synthetic(iw, ih), (ow, oh)).size
        manifest["pad"].append(dict(**{"in": [iw, ih], "out": [ow, oh]}, contain=list(fit), sha256=sha(out)))

# The reference's plan, transcribed from the spec (image_processor.py) for the goldens.
def plan(width, height, p, r, n_max, min_pixels, max_wh_ratio=None):
    if max_wh_ratio is not None and width > height * max_wh_ratio:
        width = height * max_wh_ratio
    if 0 < width * height < min_pixels:
        ratio = (min_pixels / (width * height)) ** 0.5
        width, height = int(width * ratio), int(height * ratio)
    bw, bh = math.ceil(width / p) * p, math.ceil(height / p) * p
    grid = lambda bh, bw: (math.ceil((bh // p) / r), math.ceil((bw // p) / r))
    nh, nw = grid(bh, bw)
    if nh * (nw + 1) + 2 > n_max:
        rr = height / width
        mw = math.sqrt((n_max - 2) / rr + 0.25) - 0.5
        mh = mw * rr
        cell = p * r
        if mw < 1.0:
            bh, bw = (n_max - 2) // 2 * cell, cell
        elif mh < 1.0:
            bh, bw = cell, (n_max - 3) * cell
        else:
            beta = min(math.floor(mw) * cell / width, math.floor(mh) * cell / height)
            bh, bw = math.floor(height * beta / p) * p, math.floor(width * beta / p) * p
        nh, nw = grid(bh, bw)
        assert nh * (nw + 1) + 2 <= n_max
    return dict(best_width=bw, best_height=bh, n_llm_h=nh, n_llm_w=nw)

CONFIGS = {"tiny": (14, 3, 64, 4096), "full": (14, 3, 1024, 295936)}
# Not a released config: the tiny one with vision_max_wh_ratio 4, for the stretch path.
RATIO_CONFIG = (14, 3, 64, 4096, 4)

def pipeline_goldens(manifest):
    sizes = {"tiny": [(98, 64), (32, 32), (10, 40), (1, 1000), (1000, 500), (3000, 20), (20, 3000), (1, 1),
                      (13, 300), (300, 13), (200, 150), (4096, 1), (10000, 1)],
             "full": [(98, 64), (32, 32), (960, 540), (2000, 1000), (20000, 100), (100, 20000), (1, 1),
                      (544, 544), (543, 545), (700, 10), (60000, 20), (20, 60000)]}
    manifest["plans"] = []
    manifest["fit"] = []
    for name, (p, r, n_max, min_px) in CONFIGS.items():
        for (w, h) in sizes[name]:
            pl = plan(w, h, p, r, n_max, min_px)
            manifest["plans"].append(dict(config=name, size=[w, h], **pl))
            if w * h > 2_000_000 or pl["best_width"] * pl["best_height"] > 4_000_000:
                continue
            try:
                out = ImageOps.pad(synthetic(w, h), (pl["best_width"], pl["best_height"]), color=(127, 127, 127))
                manifest["fit"].append(dict(config=name, size=[w, h], sha256=sha(out)))
            except ValueError as e:  # PIL refuses a zero-sized resize: the reference fails too
                manifest["fit"].append(dict(config=name, size=[w, h], error=str(e)))
    # load_image with max_wh_ratio set: images at least `ratio` times wider than tall are
    # stretched with a plain bicubic resize instead of letterboxed.
    manifest["ratio_config"] = dict(zip(["patch_size", "downsample_ratio", "max_n_token", "min_pixels",
                                         "max_wh_ratio"], RATIO_CONFIG))
    for (w, h) in [(300, 50), (200, 50), (100, 50), (50, 300), (2000, 10)]:
        ratio = RATIO_CONFIG[4]
        pl = plan(w, h, *RATIO_CONFIG)
        img = synthetic(w, h)
        if w >= ratio * h:
            out, stretch = img.resize((pl["best_width"], pl["best_height"])), True
        else:
            out, stretch = ImageOps.pad(img, (pl["best_width"], pl["best_height"]), color=(127, 127, 127)), False
        manifest["plans"].append(dict(config="ratio", size=[w, h], stretch=stretch, **pl))
        manifest["fit"].append(dict(config="ratio", size=[w, h], sha256=sha(out)))
    # The fixture image under the full model's config (upscaled 98x64 -> 673x439 inside 686x448).
    with Image.open("../../../tests/conformance/data/v41-tiny/image.png") as im:
        img = im.convert("RGB")
    pl = plan(img.width, img.height, *CONFIGS["full"])
    out = ImageOps.pad(img, (pl["best_width"], pl["best_height"]), color=(127, 127, 127))
    manifest["fixture_image_full_config"] = dict(**pl, sha256=sha(out))

if __name__ == "__main__":
    import PIL
    manifest = {"generator": f"make_goldens.py with Pillow {PIL.__version__}"}
    write_decode_goldens(manifest)
    resize_goldens(manifest)
    pad_goldens(manifest)
    pipeline_goldens(manifest)
    json.dump(manifest, open("goldens.json", "w"), indent=1)
