"""What the image_encode benchmarks share: the JPEG workload, the checkpoint, the contenders,
timing and the report section.

Used by bench/test_image_bench.py (pytest-benchmark) and bench/report.py (docs/benchmarks.md);
`python3 bench/image_harness.py` runs this comparison alone and prints its section.

The workload is images per second, decode + encode end to end: IMAGES JPEG files (quality 90,
photo-like content: smooth gradients, shapes, a soft blur and sensor-like noise; sides uniform
in IMAGE_SIDES) held in memory as one tape of bytes, embedded by a model of harness.SHAPE's
depth and width with image parts (patch side PATCH, context CONTEXT, so most images are
gridded to up to CONTEXT patches and resized). Both sides get the same bytes and weights and
the same threads.

- uform: `Model.image_encode((data, offsets), arena)`, one call with every file (decoding,
  resizing and patching one image per pool thread, then the encoder). For information,
  `image_encode_pixels` on the same images decoded beforehand (Pillow), and on them decoded
  and resized to their grid beforehand, so that uform's time splits into decode, resize and
  the rest (patches, projection, forward).
- torch: `TorchImageEncoder` below, what a competent PyTorch user would write: Pillow
  `Image.open(BytesIO(...)).convert("RGB")`, the grid rule, `resize(..., Image.BILINEAR)`,
  numpy -> tensor, v / 127.5 - 1, patches by reshape/permute (that per-image work on a
  thread pool of the same thread count: Pillow releases the GIL while decoding and
  resizing), then images sorted by patch count in padded mini-batches with a key-padding
  mask, `F.linear` projection + modality vector, the blocks of tests/reference/batched.py
  (`F.scaled_dot_product_attention`) with 2-axis rotary tables, final norm, mean over real
  patches, head, normalise; FP32, and inside `torch.autocast("cpu", dtype=torch.bfloat16)`.

UFORM_BENCH_QUICK=1 shrinks everything (harness.SHAPE's quick model, QUICK_IMAGES images);
UFORM_BENCH_ROUNDS overrides the timed rounds.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, NamedTuple, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts tests/ and the repository root on sys.path)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from PIL import Image, ImageDraw, ImageFilter  # noqa: E402

import uform  # noqa: E402
from reference.batched import BatchedTorchModel  # noqa: E402
from reference.media import image_grid  # noqa: E402
from reference.media_checkpoint import write_random_media_checkpoint  # noqa: E402
from reference.model import ReferenceModel, rope_angles  # noqa: E402

QUICK = harness.QUICK

PATCH = 16                        # image patch side
CONTEXT = 256                     # the model's context: at most 256 patches per image
IMAGES = 32 if QUICK else 256     # JPEG files per round (one call each side)
IMAGE_SIDES = (224, 640)          # width and height uniform in this range (inclusive)
JPEG_QUALITY = 90
SEED = 2024                       # of make_images
ROUNDS = 2 if QUICK else 3        # timed rounds after one untimed warm-up
TORCH_MINI_BATCH = 32             # images per padded torch mini-batch (sorted by patch count)

# The model: harness.SHAPE's depth, width and embedding (depth 12, hidden 512, 512; quick:
# depth 2, hidden 128), with image parts and context CONTEXT.
SHAPE = dict(harness.SHAPE, context=CONTEXT)
# Information, not a goal: a one-block, 64-wide model, so that decoding and resizing are
# nearly all of the work; compares the two preprocessing pipelines more than the encoders.
LIGHT_SHAPE = dict(depth=1, hidden=64, dimensions=64, context=CONTEXT)


def rounds() -> int:
    if os.environ.get("UFORM_BENCH_ROUNDS"):
        return max(1, int(os.environ["UFORM_BENCH_ROUNDS"]))
    return ROUNDS


# ----------------------------------------------------------------------------- workload

def make_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """[height, width, 3] uint8 with photo-like statistics: a smooth colour gradient and
    low-frequency waves, a dozen filled shapes, a slight blur, smooth luminance texture at
    two scales and Gaussian noise."""
    y = np.linspace(0.0, 1.0, height)[:, None, None]
    x = np.linspace(0.0, 1.0, width)[None, :, None]
    low, high = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    angle = rng.uniform(0, 2 * np.pi)
    t = (np.cos(angle) * x + np.sin(angle) * y)
    t = (t - t.min()) / max(t.max() - t.min(), 1e-9)
    base = low + (high - low) * t
    for _ in range(2):                                 # soft waves, per channel phase
        fy, fx = rng.uniform(0.5, 3.0, 2)
        phase = rng.uniform(0, 2 * np.pi, 3)
        base = base + rng.uniform(10, 30) * np.sin(2 * np.pi * (fy * y + fx * x) + phase)
    image = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(6, 14))):
        x0, x1 = sorted(rng.integers(0, width, 2))
        y0, y1 = sorted(rng.integers(0, height, 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        shape = int(rng.integers(0, 3))
        if shape == 0:
            draw.ellipse((x0, y0, x1, y1), fill=colour)
        elif shape == 1:
            draw.rectangle((x0, y0, x1, y1), fill=colour)
        else:
            points = [tuple(int(v) for v in (rng.integers(0, width), rng.integers(0, height)))
                      for _ in range(3)]
            draw.polygon(points, fill=colour)
    image = image.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.5, 1.5))))
    pixels = np.asarray(image, dtype=np.float64)
    for cell, amplitude in ((24, 12.0), (6, 8.0)):     # texture: smooth noise at two scales
        field = rng.normal(0.0, amplitude, (height // cell + 2, width // cell + 2)).astype(np.float32)
        field = Image.fromarray(field, mode="F").resize((width, height), Image.BICUBIC,
                                                        box=(0, 0, width / cell, height / cell))
        pixels = pixels + np.asarray(field)[:, :, None]
    pixels = pixels + rng.normal(0.0, 4.0, (height, width, 3))     # sensor-like noise
    return np.clip(pixels + 0.5, 0, 255).astype(np.uint8)


def make_images(count: int = IMAGES, seed: int = SEED) -> list[bytes]:
    """`count` JPEG files (quality JPEG_QUALITY, Pillow's default 4:2:0), sides uniform in IMAGE_SIDES."""
    rng = np.random.default_rng(seed)
    low, high = IMAGE_SIDES
    files = []
    for _ in range(count):
        height, width = (int(v) for v in rng.integers(low, high + 1, 2))
        buffer = io.BytesIO()
        Image.fromarray(make_image(rng, height, width)).save(buffer, format="JPEG", quality=JPEG_QUALITY)
        files.append(buffer.getvalue())
    return files


def files_tape(files: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(data uint8, offsets uint64): the files' bytes back to back, count + 1 offsets."""
    offsets = np.concatenate([[0], np.cumsum([len(f) for f in files])]).astype(np.uint64)
    return np.frombuffer(b"".join(files), dtype=np.uint8), offsets


def decode(data: bytes) -> np.ndarray:
    """[h, w, 3] uint8 pixels of one file, as Pillow decodes it."""
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def resize_to_grid(pixels: np.ndarray) -> np.ndarray:
    """Pixels resized (Pillow BILINEAR) to their grid's size, so the encoder resizes nothing."""
    rows, cols, _ = image_grid(pixels.shape[0], pixels.shape[1], PATCH, CONTEXT)
    if (rows * PATCH, cols * PATCH) == pixels.shape[:2]:
        return pixels
    return np.asarray(Image.fromarray(pixels).resize((cols * PATCH, rows * PATCH), Image.BILINEAR))


def write_checkpoint(directory: str, shape: dict = SHAPE) -> str:
    path = os.path.join(directory, "bench-image-d{depth}-h{hidden}-c{context}.safetensors".format(**shape))
    if not os.path.exists(path):
        write_random_media_checkpoint(path, seed=0, image={"patch_side": PATCH}, **shape)
    return path


# ----------------------------------------------------------------------------- torch

class TorchImageEncoder:
    """image_encode in PyTorch: Pillow preprocessing (a thread pool of `threads` workers),
    padded mini-batches of images sorted by patch count, BatchedTorchModel's blocks with
    2-axis rotary positions (pairs 0-15 turn with the patch row, 16-31 with the column)."""

    def __init__(self, path: str, threads: int, max_batch: int = TORCH_MINI_BATCH) -> None:
        model = ReferenceModel.load(path, dtype=torch.float32)
        self.blocks = BatchedTorchModel(model, torch.float32, max_batch=max_batch)
        self.patch_side = int(model.config["image"]["patch_side"])
        self.context = model.context
        self.dimensions = model.dimensions
        self.patch_weight = model.weight("image.patch.weight").detach().contiguous()   # [H, P*P*3]
        self.patch_bias = model.weight("image.patch.bias").detach().contiguous()
        self.modality = model.weight("image.modality").detach().contiguous()
        self.patch_bf16 = (self.patch_weight.to(torch.bfloat16), self.patch_bias.to(torch.bfloat16))
        self.max_batch = max_batch
        self.pool = ThreadPoolExecutor(max_workers=threads) if threads > 1 else None
        self._rope: dict = {}             # (rows, cols) -> (cos, sin) [rows*cols, 32] float32
        self.preprocess_seconds = 0.0     # of the last encode call

    # ---------------------------------------------------------------- preprocessing

    def patches(self, pixels: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
        """([rows*cols, P*P*3] uint8, (rows, cols)) of [h, w, 3] uint8 pixels: the grid rule,
        Pillow BILINEAR to the grid's size, row-major patches in (row, col, channel) order.
        Runs on the pool: Pillow releases the GIL; values are scaled later, a batch at once."""
        P = self.patch_side
        rows, cols, _ = image_grid(pixels.shape[0], pixels.shape[1], P, self.context)
        if (rows * P, cols * P) != pixels.shape[:2]:
            pixels = np.asarray(Image.fromarray(pixels).resize((cols * P, rows * P), Image.BILINEAR))
        grid = pixels.reshape(rows, P, cols, P, 3).transpose(0, 2, 1, 3, 4)
        return np.ascontiguousarray(grid).reshape(rows * cols, P * P * 3), (rows, cols)

    def file_patches(self, data: bytes) -> tuple[np.ndarray, tuple[int, int]]:
        with Image.open(io.BytesIO(data)) as image:
            pixels = np.asarray(image.convert("RGB"))
        return self.patches(pixels)

    def _map(self, function, items) -> list:
        return list(self.pool.map(function, items)) if self.pool else [function(i) for i in items]

    # ---------------------------------------------------------------- the model

    def _rope_tables(self, grid: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        if grid not in self._rope:
            rows, cols = grid
            positions = torch.stack(torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij"),
                                    -1).reshape(-1, 2)
            angles = rope_angles(positions, torch.float64)                     # [n, 32]
            self._rope[grid] = (torch.cos(angles).float(), torch.sin(angles).float())
        return self._rope[grid]

    def _forward(self, items: list, autocast: bool) -> torch.Tensor:
        """Embeddings [B, D] of a mini-batch of (patches [n, P*P*3], grid) items."""
        blocks = self.blocks
        B = len(items)
        lengths = torch.tensor([len(p) for p, _ in items])
        L = int(lengths.max())
        padded = np.zeros((B, L, items[0][0].shape[1]), dtype=np.uint8)
        cos = torch.zeros(B, 1, L, 32)
        sin = torch.zeros(B, 1, L, 32)
        for b, (p, grid) in enumerate(items):
            padded[b, :len(p)] = p
            c, s = self._rope_tables(grid)
            cos[b, 0, :len(p)], sin[b, 0, :len(p)] = c, s
        valid = torch.arange(L).unsqueeze(0) < lengths.unsqueeze(1)            # [B, L]
        key_mask = valid.view(B, 1, 1, L)
        values = torch.from_numpy(padded).float().div_(127.5).sub_(1.0)                          # padding: -1, masked
        weight, bias = self.patch_bf16 if autocast else (self.patch_weight, self.patch_bias)
        x = F.linear(values, weight, bias).float() + self.modality            # [B, L, H], FP32 stream
        layers, embedding_head = blocks._linear_weights(autocast)
        A, H = blocks.heads_count, blocks.hidden
        rope: dict = {}
        for weights in layers:
            y = blocks._norm(x, weights["attention_norm"])
            qkv = F.linear(y, *weights["qkv"])
            q, k, v = qkv.view(B, L, 3, A, 64).permute(2, 0, 3, 1, 4).unbind(0)
            if q.dtype not in rope:
                rope[q.dtype] = (cos.to(q.dtype), sin.to(q.dtype))
            q, k = blocks._apply_rope(q, *rope[q.dtype]), blocks._apply_rope(k, *rope[q.dtype])
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask)
            heads = heads.transpose(1, 2).reshape(B, L, H)
            x = x + F.linear(heads, *weights["out"])
            y = blocks._norm(x, weights["mlp_norm"])
            y = F.gelu(F.linear(y, *weights["up"]), approximate="tanh")
            x = x + F.linear(y, *weights["down"])
        h = blocks._norm(x, blocks.final_norm)
        real = valid.unsqueeze(-1).to(h.dtype)
        mean = (h * real).sum(dim=1) / lengths.unsqueeze(1).to(h.dtype)
        return F.normalize(F.linear(mean, embedding_head).float(), dim=-1, eps=1e-12)

    def encode_items(self, items: list, autocast: bool) -> np.ndarray:
        """Embeddings [n, D] of preprocessed (uint8 patches, grid) items, in their order."""
        result = torch.zeros(len(items), self.dimensions)
        order = sorted(range(len(items)), key=lambda i: len(items[i][0]))
        region = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
        with torch.inference_mode(), region:
            for start in range(0, len(order), self.max_batch):
                chunk = order[start:start + self.max_batch]
                result[torch.tensor(chunk)] = self._forward([items[i] for i in chunk], autocast)
        return result.numpy()

    def encode_files(self, files: list[bytes], autocast: bool) -> np.ndarray:
        """Decode + encode: the files' embeddings [n, D]; preprocess_seconds the decode,
        resize and patch share of the call."""
        start = time.perf_counter()
        items = self._map(self.file_patches, files)
        self.preprocess_seconds = time.perf_counter() - start
        return self.encode_items(items, autocast)

    def encode_pixels(self, images: list[np.ndarray], autocast: bool) -> np.ndarray:
        return self.encode_items(self._map(self.patches, images), autocast)


# ----------------------------------------------------------------------------- contenders

class Contender(NamedTuple):
    key: str
    label: str
    encode: Callable[["Inputs"], np.ndarray]   # one round: every file of the inputs -> [n, D] float32
    preprocess: Optional[Callable[[], float]]  # seconds of the last round's decode + resize, if known
    uform_class: Optional[str]


class Inputs(NamedTuple):
    files: list                 # bytes per JPEG file
    tape: tuple                 # (data, offsets) of the same bytes
    decoded: list               # [h, w, 3] uint8 per file (Pillow), for the information rows
    gridded: list               # decoded and resized to the grid's size (Pillow), likewise
    tokens: int                 # patches in all


def make_inputs(count: int = IMAGES, seed: int = SEED) -> Inputs:
    files = make_images(count, seed)
    decoded = [decode(f) for f in files]
    gridded = [resize_to_grid(d) for d in decoded]
    tokens = sum(g.shape[0] * g.shape[1] // (PATCH * PATCH) for g in gridded)
    return Inputs(files, files_tape(files), decoded, gridded, tokens)


def contenders(path: str, threads: int, information: bool = True) -> list[Contender]:
    """uform image_encode (auto class), torch BF16 autocast, torch FP32; with `information`,
    uform image_encode_pixels on decoded and on decoded + resized images too."""
    executor = uform.Executor.for_ram(threads)
    assert executor.threads == threads, (executor.threads, threads)
    model = uform.Model.load_ram(path, executor=executor)
    chosen = model.describe().cpu_class
    math = "BF16 products, FP32 sums" if harness.bf16_products(chosen) else "FP32"
    arena = uform.Arena()

    def uform_files(inputs: Inputs) -> np.ndarray:
        return np.asarray(model.image_encode(inputs.tape, arena).embeddings)   # a view into the arena

    found = [Contender("uform", f"uform {chosen.name} image_encode ({math})", uform_files, None, chosen.name)]
    if information:
        found.append(Contender("uform-pixels", f"uform {chosen.name} image_encode_pixels, decoded beforehand",
                               lambda inputs: np.asarray(model.image_encode_pixels(inputs.decoded, arena).embeddings),
                               None, chosen.name))
        found.append(Contender("uform-gridded", f"uform {chosen.name} image_encode_pixels, decoded and "
                               "resized beforehand",
                               lambda inputs: np.asarray(model.image_encode_pixels(inputs.gridded, arena).embeddings),
                               None, chosen.name))
    encoder = TorchImageEncoder(path, threads)
    if harness.TORCH_BF16:
        found.append(Contender("torch-bf16", "Pillow + torch BF16 autocast",
                               lambda inputs: encoder.encode_files(inputs.files, autocast=True),
                               lambda: encoder.preprocess_seconds, None))
    found.append(Contender("torch-fp32", "Pillow + torch FP32",
                           lambda inputs: encoder.encode_files(inputs.files, autocast=False),
                           lambda: encoder.preprocess_seconds, None))
    return found


def time_rounds(contender: Contender, inputs: Inputs, count: int) -> dict:
    """An untimed warm-up, then `count` rounds: seconds, preprocessing seconds (torch) and
    the last round's embeddings."""
    contender.encode(inputs)
    seconds, preprocess, result = [], [], None
    for _ in range(count):
        start = time.perf_counter()
        result = contender.encode(inputs)
        seconds.append(time.perf_counter() - start)
        if contender.preprocess is not None:
            preprocess.append(contender.preprocess())
    return {"label": contender.label, "seconds": seconds, "preprocess": preprocess,
            "embeddings": np.array(result, dtype=np.float32, copy=True)}


def measure(threads: int, log: Callable[[str], None], directory: str, *, light: bool = True) -> dict:
    """{'inputs', 'shape', 'load', 'main': {key: result}, 'light': {key: result}}."""
    load = [os.getloadavg()[0]]
    inputs = make_inputs()
    log(f"image_encode: {len(inputs.files)} JPEG files, {sum(map(len, inputs.files)) / 1e6:.1f} MB, "
        f"{inputs.tokens} patches")
    results = {"inputs": inputs, "shapes": {}}
    cases = [("main", SHAPE)] + ([("light", LIGHT_SHAPE)] if light else [])
    for case, shape in cases:
        path = write_checkpoint(directory, shape)
        found = contenders(path, threads)
        results["shapes"][case] = shape
        results[case] = {}
        for contender in found:
            r = time_rounds(contender, inputs, rounds())
            results[case][contender.key] = r
            rate = len(inputs.files) / min(r["seconds"])
            log(f"image_encode d{shape['depth']} h{shape['hidden']}  {contender.label:<64} "
                f"best {min(r['seconds']):8.3f} s  {rate:8.2f} images/s")
        check_agreement(results[case])
    load.append(os.getloadavg()[0])
    results["load"] = load
    return results


def cosines(results: dict, key: str, against: str = "torch-fp32") -> np.ndarray:
    return (results[key]["embeddings"] * results[against]["embeddings"]).sum(axis=1)


def check_agreement(results: dict) -> None:
    """Every contender's embeddings of the timed round against torch FP32's: cosine > 0.99
    (BF16) and > 0.999 (FP32); the pixels from Pillow's and uform's resize differ by up to
    one level, which moves FP32 embeddings by ~1e-3)."""
    for key in results:
        if key == "torch-fp32":
            continue
        least = float(cosines(results, key).min())
        assert least > 0.99, (key, least)



# ----------------------------------------------------------------------------- report

def _best(result: dict) -> tuple[float, Optional[float]]:
    """(seconds of the best round, its preprocessing seconds when known)."""
    index = int(np.argmin(result["seconds"]))
    pre = result["preprocess"][index] if result["preprocess"] else None
    return result["seconds"][index], pre


def breakdown(case: dict) -> dict:
    """Where each side's best round goes, in seconds: uform from its three rows (files,
    decoded pixels, decoded and resized pixels), torch from its preprocessing timer."""
    out = {}
    if {"uform", "uform-pixels", "uform-gridded"} <= case.keys():
        files, pixels, gridded = (_best(case[k])[0] for k in ("uform", "uform-pixels", "uform-gridded"))
        out["uform"] = {"decode": files - pixels, "resize": pixels - gridded, "rest": gridded}
    for key in ("torch-bf16", "torch-fp32"):
        if key in case:
            seconds, pre = _best(case[key])
            out[key] = {"preprocess": pre, "rest": seconds - pre}
    return out


def image_flops(inputs: Inputs, shape: dict) -> dict:
    """Useful FLOPs of one round (no padding): GEMMs per patch per layer 2 x 12 x H^2 (qkv,
    out, MLP up and down) plus the projection 2 x P^2 x 3 x H, the embedding head 2 x D x H
    per image; attention (QK^T and PV) 4 x L^2 x H per image per layer."""
    H, D, depth = shape["hidden"], shape["dimensions"], shape["depth"]
    lengths = np.array([g.shape[0] * g.shape[1] // (PATCH * PATCH) for g in inputs.gridded], dtype=np.float64)
    gemm = lengths.sum() * (depth * 24.0 * H * H + 2.0 * PATCH * PATCH * 3 * H) + len(lengths) * 2.0 * D * H
    attention = depth * 4.0 * H * (lengths ** 2).sum()
    return {"gemm": gemm, "attention": attention}


def _case_lines(case: dict, n: int, flops: dict) -> list[str]:
    """A case's table (images/s, best round, decode + resize, the rest, useful GEMM rate of
    the rest), its ratios and where each side's time goes."""
    rate = {k: n / _best(r)[0] for k, r in case.items()}
    split = breakdown(case)
    out = ["| implementation | images per second | best round (s) | decode + resize (s) | the rest (s) "
           "| GEMM GFLOP/s in the rest |",
           "|---|---:|---:|---:|---:|---:|"]
    for key, r in case.items():
        seconds, pre = _best(r)
        if "uform" in split and key in ("uform", "uform-pixels", "uform-gridded"):
            u = split["uform"]
            pre = {"uform": u["decode"] + u["resize"], "uform-pixels": u["resize"], "uform-gridded": 0.0}[key]
        cells = ((f"{pre:.2f}", f"{seconds - pre:.2f}", f"{flops['gemm'] / (seconds - pre) * 1e-9:.0f}")
                 if pre is not None else ("", "", ""))
        out.append(f"| {r['label']} | {rate[key]:.1f} | {seconds:.2f} | {' | '.join(cells)} |")
    out += ["", f"Useful work of a round: {flops['gemm'] * 1e-9:.0f} GFLOP of GEMMs (no padding; per patch "
            "per layer 2 x 12 x H^2, the projection 2 x 768 x H per patch, the head 2 x D x H per "
            f"image), attention another {flops['attention'] * 1e-9:.0f} GFLOP (4 x L^2 x H per image "
            "per layer).\n", "Ratios (uform `image_encode` images/s divided by the other's; above 1: uform is faster):\n",
            "| against | ratio |", "|---|---:|"]
    for key in ("torch-bf16", "torch-fp32"):
        if key in case:
            out.append(f"| {case[key]['label']} | {rate['uform'] / rate[key]:.2f}x |")
    out.append("")
    if "uform" in split:
        u = split["uform"]
        total = sum(u.values())

        def part(seconds: float) -> str:
            if seconds < 0:
                return f"about 0 s (the difference is {seconds:.2f} s: noise)"
            return f"{seconds:.2f} s ({seconds / total:.0%})"
        out.append(f"Where the time goes (best rounds). uform: decoding {part(u['decode'])}, resizing "
                   f"{part(u['resize'])}, patches, projection and the encoder {part(u['rest'])} "
                   "(differences of the three uform rows, so a few hundredths of a second are noise).")
    for key in ("torch-bf16", "torch-fp32"):
        if key in split:
            t = split[key]
            total = t["preprocess"] + t["rest"]
            out.append(f"{case[key]['label']}: Pillow decode + resize + patches {t['preprocess']:.2f} s "
                       f"({t['preprocess'] / total:.0%}), the model {t['rest']:.2f} s ({t['rest'] / total:.0%}).")
    out.append("")
    return out


def report_section(results: dict, threads: int) -> str:
    """docs/benchmarks.md's image_encode section."""
    inputs: Inputs = results["inputs"]
    n = len(inputs.files)
    low, high = IMAGE_SIDES
    shape = results["shapes"]["main"]
    main = results["main"]
    rate = {k: n / _best(r)[0] for k, r in main.items()}
    load_before, load_after = results["load"]
    megabytes = sum(map(len, inputs.files)) / 1e6
    out = ["## image_encode: decode + encode vs Pillow + PyTorch\n",
           f"{n} JPEG files (quality {JPEG_QUALITY}, 4:2:0; photo-like content: colour gradients, "
           f"waves, filled shapes, a slight blur, smooth texture and noise; width and height uniform in [{low}, "
           f"{high}]; {megabytes:.1f} MB in all) held in memory, the same bytes for both sides. "
           f"Model: `write_random_media_checkpoint` (seed 0), depth {shape['depth']}, hidden "
           f"{shape['hidden']}, embedding {shape['dimensions']}, image patch side {PATCH}, context "
           f"{CONTEXT}: images are gridded to at most {CONTEXT} patches and resized "
           f"({inputs.tokens} patches in all, {inputs.tokens / n:.0f} per image). One round embeds "
           f"every file, end to end (bytes in, normalised embeddings out); best of {rounds()} rounds "
           f"after an untimed warm-up; {threads} threads for both.\n",
           f"- uform: `Model.image_encode((data, offsets), arena)`, one call with all {n} files "
           "(decoding (libjpeg-turbo), resizing and patches one image per pool thread, then the "
           "encoder). For information, `image_encode_pixels` on the images decoded beforehand "
           "(Pillow), and decoded and resized to their grid beforehand: the differences split "
           "uform's time into decoding, resizing and the rest.",
           f"- PyTorch: `bench/image_harness.py` `TorchImageEncoder`: Pillow `Image.open(BytesIO)"
           f".convert(\"RGB\")`, the grid rule, `resize(..., Image.BILINEAR)` and patches by numpy "
           f"reshape/transpose on a thread pool of {threads} workers (Pillow releases the GIL while "
           f"decoding and resizing), then images sorted by patch count in padded mini-batches of "
           f"{TORCH_MINI_BATCH} with a key-padding mask, v / 127.5 - 1, `F.linear` projection + "
           "modality vector, `BatchedTorchModel`'s blocks (`F.scaled_dot_product_attention`) with "
           "2-axis rotary tables (pairs 0-15 turn with the patch row, 16-31 with the column), final "
           "norm, mean over real patches, head, normalise; FP32, and inside `torch.autocast(\"cpu\", "
           "dtype=torch.bfloat16)` (linear weights cast to BF16 once). Its FP32 output is within "
           "1e-4 of the float64 reference on images already of their grid's size "
           "(`bench/test_image_bench.py`).",
           f"- 1-minute load average before this comparison {load_before:.2f}, after {load_after:.2f} "
           f"({os.cpu_count()} logical CPUs: near 0 before and near {threads} after on an otherwise "
           "idle machine; more means other work shared the cores, which hurts torch's OpenMP "
           "threads far more than uform's pool).\n"]
    out += _case_lines(main, n, image_flops(inputs, shape))
    if "torch-bf16" in main:
        fastest = max((k for k in ("torch-bf16", "torch-fp32") if k in main), key=lambda k: rate[k])
        ratio = rate["uform"] / rate[fastest]
        out.append(f"Goal: decode + encode at least 1.5x as fast as the faster PyTorch mode "
                   f"({main[fastest]['label']}): {ratio:.2f}x, {'**met**' if ratio >= 1.5 else '**missed**'}.\n")
    out += ["Agreement on the timed round, against torch FP32's embeddings (Pillow's and uform's "
            "resize differ by up to one level of 255, docs/media.md):\n",
            "| implementation | min cosine | max abs difference |", "|---|---:|---:|"]
    for key, r in main.items():
        if key != "torch-fp32" and "torch-fp32" in main:
            base = main["torch-fp32"]["embeddings"]
            out.append(f"| {r['label']} | {cosines(main, key).min():.6f} | "
                       f"{np.abs(r['embeddings'] - base).max():.2e} |")
    out.append("")
    if "light" in results:
        lshape = results["shapes"]["light"]
        out.append(f"### Information, not a goal: a depth-{lshape['depth']}, hidden-{lshape['hidden']} model\n")
        out.append("The same files through a model so small that decoding and resizing are most "
                   "of the work: this compares the two preprocessing pipelines more than the encoders.\n")
        out += _case_lines(results["light"], n, image_flops(inputs, lshape))
    return "\n".join(out) + "\n"


def main() -> None:
    import tempfile
    threads = harness.thread_count()
    harness.configure_torch(threads)
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory() as directory:
        results = measure(threads, log, directory, light=os.environ.get("UFORM_BENCH_IMAGE_LIGHT", "1") != "0")
    sys.stdout.write(report_section(results, threads))


if __name__ == "__main__":
    main()
