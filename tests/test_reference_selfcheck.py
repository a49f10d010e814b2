"""Checks the PyTorch reference (tests/reference) on its own, without the C library.

The reference is the oracle for everything else, so here it is compared against
independent, deliberately naive re-implementations written from DESIGN section 5's
words: scalar loops for RoPE, explicit per-head loops for attention, numpy float64.
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from reference import (  # noqa: E402
    ReferenceModel,
    apply_rope,
    bf16_bits_to_f32,
    f32_to_bf16_bits,
    rope_angles,
    safetensors_io,
    write_random_checkpoint,
)

# Both sides compute in float64 from identical weights; only summation order differs.
FORWARD_TOLERANCE = 1e-10


# ----------------------------------------------------------------------------- (a) safetensors

def torch_bf16_bits(values: np.ndarray) -> np.ndarray:
    """torch's own float32 -> bfloat16 conversion, as uint16 bit patterns."""
    converted = torch.from_numpy(values).to(torch.bfloat16)
    return converted.view(torch.int16).numpy().view(np.uint16)


def test_bf16_rounding_matches_torch() -> None:
    rng = np.random.default_rng(1)
    # Random bit patterns cover every exponent, subnormals and infinities alike.
    random_bits = rng.integers(0, 2 ** 32, size=200_000, dtype=np.uint64).astype(np.uint32)
    # Ties (low half exactly 0x8000) with even and odd kept halves, and their neighbours.
    uppers = np.array([0x3F80, 0x3F81, 0x0000, 0x0001, 0x7F7E, 0x7F7F, 0x8000, 0xBF81],
                      dtype=np.uint32)
    lows = np.array([0x7FFF, 0x8000, 0x8001, 0x0000, 0xFFFF], dtype=np.uint32)
    edge_bits = ((uppers[:, None] << 16) | lows[None, :]).ravel()
    values = np.concatenate([random_bits, edge_bits]).view(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.finfo(np.float32).max,
                         np.finfo(np.float32).tiny, 1e-45, 1.0, -1.0 / 3.0], dtype=np.float32)
    values = np.concatenate([values, specials])

    ours, theirs = f32_to_bf16_bits(values), torch_bf16_bits(values)
    nan = np.isnan(values)
    assert np.array_equal(ours[~nan], theirs[~nan])
    assert np.isnan(bf16_bits_to_f32(ours[nan])).all()
    # Upcasting is exact: torch's bfloat16 -> float32 gives the same values.
    back = torch.from_numpy(theirs.view(np.int16)).view(torch.bfloat16).float().numpy()
    assert np.array_equal(bf16_bits_to_f32(theirs)[~nan], back[~nan])


def test_safetensors_round_trip_and_layout(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    floats = rng.standard_normal((5, 7)).astype(np.float32)
    tensors = {
        "f32": floats,
        "f64": rng.standard_normal(3),
        "f16": rng.standard_normal((2, 3)).astype(np.float16),
        "i64": np.arange(-3, 3, dtype=np.int64),
        "i32": np.array([[1, -2], [3, 4]], dtype=np.int32),
        "u8": np.arange(5, dtype=np.uint8),            # odd size: the next one is unaligned
        "bool": np.array([True, False, True]),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "bf16.values": ("BF16", floats),
        "bf16.bits": ("BF16", torch_bf16_bits(floats)),
    }
    metadata = {"uform": json.dumps({"version": 4}), "note": "naïve ✓"}
    path = tmp_path / "t.safetensors"
    safetensors_io.write(path, tensors, metadata)

    read, read_metadata = safetensors_io.read(path)
    assert read_metadata == metadata
    assert list(read) == list(tensors)
    for name, spec in tensors.items():
        dtype, array = read[name]
        if isinstance(spec, tuple):
            assert dtype == "BF16" and array.dtype == np.float32
            expected = torch.from_numpy(floats).to(torch.bfloat16).float().numpy()
            assert np.array_equal(array, expected), name
        else:
            assert array.dtype == spec.dtype and array.shape == spec.shape, name
            assert np.array_equal(array, spec), name
            array[...] = array          # the reader hands back writable copies

    # The layout, read by hand: padded header, contiguous data in the order written.
    data = path.read_bytes()
    (length,) = struct.unpack_from("<Q", data, 0)
    assert length % 8 == 0
    text = data[8:8 + length].decode("utf-8")
    assert text.rstrip(" ").endswith("}") and len(text) - len(text.rstrip(" ")) < 8
    header = json.loads(text)
    assert header.pop("__metadata__") == metadata
    end = 0
    for name in tensors:
        begin, stop = header[name]["data_offsets"]
        assert begin == end, name
        end = stop
    assert 8 + length + end == len(data)
    bf16 = header["bf16.values"]
    raw = np.frombuffer(data, "<u2", count=35, offset=8 + length + bf16["data_offsets"][0])
    assert np.array_equal(raw, torch_bf16_bits(floats).ravel())


@pytest.mark.parametrize("damage", ["short", "length", "json", "offsets", "size"])
def test_safetensors_reader_rejects_corruption(damage: str) -> None:
    good = safetensors_io.serialize({"x": np.zeros(4, dtype=np.float32)})
    (length,) = struct.unpack_from("<Q", good, 0)
    header = json.loads(good[8:8 + length])
    if damage == "short":
        bad = good[:5]
    elif damage == "length":
        bad = struct.pack("<Q", len(good)) + good[8:]
    elif damage == "json":
        bad = good[:8] + b"[" + good[9:]
    else:
        header["x"]["data_offsets"] = [0, 32] if damage == "offsets" else [0, 8]
        text = json.dumps(header).encode()
        bad = struct.pack("<Q", len(text)) + text + good[8 + length:]
    with pytest.raises(ValueError):
        safetensors_io.deserialize(bad)


# ----------------------------------------------------------------------------- (b) RoPE

def naive_rope(x: np.ndarray, positions: list[list[int]]) -> np.ndarray:
    """RoPE from DESIGN's words, one scalar at a time: x [n, heads, 64], positions [n][k]."""
    out = x.copy()
    for t, position in enumerate(positions):
        k = len(position)
        # 32 pairs split into k contiguous groups; the first (32 mod k) get one more pair.
        sizes = [32 // k] * k
        for g in range(32 % k):
            sizes[g] += 1
        for head in range(x.shape[1]):
            for j in range(32):
                group, start = 0, 0
                while j >= start + sizes[group]:
                    start += sizes[group]
                    group += 1
                i = j - start
                angle = position[group] * math.pow(10000.0, -i / sizes[group])
                a, b = x[t, head, j], x[t, head, j + 32]
                out[t, head, j] = a * math.cos(angle) - b * math.sin(angle)
                out[t, head, j + 32] = a * math.sin(angle) + b * math.cos(angle)
    return out


@pytest.mark.parametrize("axes", [1, 2, 3, 5, 7, 32])
def test_rope_matches_naive_loops(axes: int) -> None:
    rng = np.random.default_rng(3 + axes)
    n = 9
    positions = rng.integers(0, 300, size=(n, axes)).tolist()
    positions[0] = [0] * axes                       # position 0 must be the identity
    x = rng.standard_normal((n, 3, 64))
    ours = apply_rope(torch.from_numpy(x), rope_angles(torch.tensor(positions))).numpy()
    assert np.abs(ours - naive_rope(x, positions)).max() < 1e-12
    assert np.array_equal(ours[0], x[0])


def test_rope_group_split() -> None:
    # DESIGN's examples, checked through the angles: group a starts at frequency 1.
    starts = {1: [0], 2: [0, 16], 3: [0, 11, 22]}
    for k, first_pairs in starts.items():
        angles = rope_angles(torch.eye(k, dtype=torch.long))      # axis a at position 1
        for a, j in enumerate(first_pairs):
            assert angles[a, j] == 1.0
            assert torch.count_nonzero(angles[a]) == (32 // k + (1 if a < 32 % k else 0))


def test_rope_scores_depend_on_offset_only() -> None:
    rng = np.random.default_rng(4)
    q, k = (torch.from_numpy(rng.standard_normal((1, 1, 64))) for _ in range(2))

    def score(p: int, s: int) -> float:
        rotated_q = apply_rope(q, rope_angles(torch.tensor([[p]])))
        rotated_k = apply_rope(k, rope_angles(torch.tensor([[s]])))
        return float((rotated_q * rotated_k).sum())

    assert abs(score(3, 10) - score(103, 110)) < 1e-10
    assert abs(score(3, 10) - score(3, 11)) > 1e-3


# ----------------------------------------------------------------------------- (c) forward

def naive_forward(weights: dict[str, np.ndarray], text: bytes, context: int,
                  attention_rows: list[np.ndarray]) -> np.ndarray:
    """Final states h [n, H] of a depth-1 model, with loops over heads and token pairs.

    Appends every attention-probability row to `attention_rows` for the caller.
    """
    w = weights
    H = w["text.bytes"].shape[1]
    ids = list(text[:context])
    n = len(ids)

    def norm(rows: np.ndarray, prefix: str) -> np.ndarray:
        out = np.empty_like(rows)
        for t in range(rows.shape[0]):
            mean = sum(rows[t]) / H
            variance = sum((v - mean) ** 2 for v in rows[t]) / H
            out[t] = (rows[t] - mean) / math.sqrt(variance + 1e-5)
        return out * w[f"{prefix}.weight"] + w[f"{prefix}.bias"]

    x = np.stack([w["text.bytes"][i] + w["text.modality"] for i in ids])

    y = norm(x, "blocks.0.attention.norm")
    qkv = y @ w["blocks.0.attention.qkv.weight"].T + w["blocks.0.attention.qkv.bias"]
    concatenated = np.zeros((n, H))
    for head in range(H // 64):
        q = qkv[:, None, 0 * H + 64 * head:0 * H + 64 * head + 64]
        k = qkv[:, None, 1 * H + 64 * head:1 * H + 64 * head + 64]
        v = qkv[:, 2 * H + 64 * head:2 * H + 64 * head + 64]
        q = naive_rope(q, [[t] for t in range(n)])[:, 0]
        k = naive_rope(k, [[t] for t in range(n)])[:, 0]
        for t in range(n):
            scores = [sum(q[t, d] * k[s, d] for d in range(64)) / 8.0 for s in range(n)]
            top = max(scores)
            exps = [math.exp(score - top) for score in scores]
            probabilities = np.array(exps) / sum(exps)
            attention_rows.append(probabilities)
            for s in range(n):
                concatenated[t, 64 * head:64 * head + 64] += probabilities[s] * v[s]
    x = x + concatenated @ w["blocks.0.attention.out.weight"].T + w["blocks.0.attention.out.bias"]

    y = norm(x, "blocks.0.mlp.norm")
    up = y @ w["blocks.0.mlp.up.weight"].T + w["blocks.0.mlp.up.bias"]
    activated = np.vectorize(
        lambda u: 0.5 * u * (1 + math.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3))))(up)
    x = x + activated @ w["blocks.0.mlp.down.weight"].T + w["blocks.0.mlp.down.bias"]
    return norm(x, "norm")


def unit(v: np.ndarray) -> np.ndarray:
    return v / max(math.sqrt(sum(float(c) ** 2 for c in v)), 1e-12)


@pytest.fixture(scope="module")
def depth1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("reference") / "depth1.safetensors"
    write_random_checkpoint(path, depth=1, hidden=128, dimensions=48, context=20,
                            token_width=24, byte_head=True, seed=5)
    return path


def test_checkpoint_contents(depth1: Path) -> None:
    tensors, metadata = safetensors_io.read(depth1)
    assert json.loads(metadata["uform"]) == {
        "version": 4, "depth": 1, "hidden": 128, "dimensions": 48, "context": 20,
        "token_width": 24, "choice_temperature_groups": 1, "step": 0}
    assert all(dtype == "BF16" for dtype, _ in tensors.values())
    assert tensors["blocks.0.attention.qkv.weight"][1].shape == (384, 128)
    model = ReferenceModel.load(depth1)
    for name, (_, value) in tensors.items():           # upcast to float64 exactly
        assert np.array_equal(model.weight(name).detach().numpy(), value.astype(np.float64))
    assert {name for name, _ in model.named_parameters()} == set(tensors)


def test_forward_matches_naive_loops(depth1: Path) -> None:
    model = ReferenceModel.load(depth1)
    weights = {name: value.astype(np.float64)
               for name, (_, value) in safetensors_io.read(depth1)[0].items()}
    texts = [b"hello, world", "naïve \x00 caf\u00e9 \U0001F600, cut here".encode(), b"x"]
    with torch.no_grad():
        embeddings, tokens = model.text_encode(texts)
    assert tokens is not None
    attention_rows: list[np.ndarray] = []
    for i, text in enumerate(texts):
        h = naive_forward(weights, text, 20, attention_rows)
        assert h.shape[0] == min(len(text), 20)
        expected_embedding = unit(weights["heads.embedding.weight"] @ (h.sum(axis=0) / len(h)))
        expected_tokens = np.stack([unit(weights["heads.tokens.weight"] @ row) for row in h])
        expected_logits = h @ weights["text.bytes"][:256].T + weights["heads.bytes.bias"]
        with torch.no_grad():
            logits = model.byte_logits(text).numpy()
        assert np.abs(embeddings[i].numpy() - expected_embedding).max() < FORWARD_TOLERANCE
        assert np.abs(tokens[i].numpy() - expected_tokens).max() < FORWARD_TOLERANCE
        assert np.abs(logits - expected_logits).max() < FORWARD_TOLERANCE
    # The random weights must exercise attention: some rows far from uniform.
    assert max(row.max() for row in attention_rows if len(row) > 4) > 0.5


def test_text_cut_at_context(depth1: Path) -> None:
    model = ReferenceModel.load(depth1)
    text = bytes(range(40, 80))
    with torch.no_grad():
        long, long_tokens = model.text_encode([text])
        cut, cut_tokens = model.text_encode([text[:20]])
    assert torch.equal(long, cut) and torch.equal(long_tokens[0], cut_tokens[0])
    assert long_tokens[0].shape == (20, 24)


# ----------------------------------------------------------------------------- (d), (e)

def test_unit_norms_and_matryoshka_prefixes(depth1: Path) -> None:
    model = ReferenceModel.load(depth1)
    with torch.no_grad():
        embeddings, tokens = model.text_encode([b"one", b"two words", "Ünïcödé".encode()])
    assert torch.allclose(embeddings.norm(dim=1), torch.ones(3, dtype=torch.float64), atol=1e-12)
    for width in (8, 16, 32, 48):
        prefix = embeddings[:, :width]
        renormalised = prefix / prefix.norm(dim=1, keepdim=True)
        assert torch.allclose(renormalised.norm(dim=1), torch.ones(3, dtype=torch.float64),
                              atol=1e-12)
    for rows in tokens:
        assert torch.allclose(rows.norm(dim=1), torch.ones(len(rows), dtype=torch.float64),
                              atol=1e-12)


def test_empty_text(depth1: Path) -> None:
    model = ReferenceModel.load(depth1)
    with torch.no_grad():
        embeddings, tokens = model.text_encode([b"", b"a", ""])
        none, no_tokens = model.text_encode([])
    assert torch.equal(embeddings[0], torch.zeros(48, dtype=torch.float64))
    assert torch.equal(embeddings[2], torch.zeros(48, dtype=torch.float64))
    assert embeddings[1].norm() > 0.5
    assert tokens[0].shape == (0, 24) and tokens[2].shape == (0, 24)
    assert none.shape == (0, 48) and no_tokens == []


def test_optional_heads(tmp_path: Path) -> None:
    path = tmp_path / "plain.safetensors"
    write_random_checkpoint(path, depth=2, hidden=64, dimensions=16, context=8)
    tensors, metadata = safetensors_io.read(path)
    assert not any(name.startswith(("heads.tokens", "heads.bytes", "choices")) for name in tensors)
    assert json.loads(metadata["uform"])["choice_temperature_groups"] == 0
    model = ReferenceModel.load(path)
    with torch.no_grad():
        embeddings, tokens = model.text_encode([b"abc"])
    assert embeddings.shape == (1, 16) and tokens is None
    with pytest.raises(ValueError):
        model.byte_logits(b"abc")

    chooser = tmp_path / "choices.safetensors"
    write_random_checkpoint(chooser, depth=1, hidden=64, dimensions=16, context=8,
                            byte_head=True, choice_temperature_groups=3)
    tensors, metadata = safetensors_io.read(chooser)
    assert tensors["choices.log_temperature"][0] == "F32"
    assert tensors["choices.log_temperature"][1].shape == (3,)
    assert json.loads(metadata["uform"])["choice_temperature_groups"] == 3
    with pytest.raises(ValueError):
        write_random_checkpoint(tmp_path / "bad.safetensors", depth=1, hidden=64, dimensions=16,
                                context=8, choice_temperature_groups=2)


def test_text_choose_is_the_byte_head_at_mask(tmp_path: Path) -> None:
    """text_choose against byte_logits, a separate path through the reference: with MASK's
    table row made equal to byte X's, the text cut to context - 1 plus X is the same input,
    so the choices' probabilities are softmax(byte_logits[-1][choices] / T). This pins the
    cut at context - 1, MASK at position len(kept), the chosen logits and the temperature."""
    path = tmp_path / "chooser.safetensors"
    write_random_checkpoint(path, depth=2, hidden=64, dimensions=16, context=12,
                            byte_head=True, choice_temperature_groups=3, seed=4)
    model = ReferenceModel.load(path)
    stand_in = 0x5A
    with torch.no_grad():
        model.weight("text.bytes")[256] = model.weight("text.bytes")[stand_in]
        temperatures = torch.exp(model.weight("choices.log_temperature"))
        for text in (b"", b"ab", b"0123456789a", b"a much longer text than the context"):
            for group in range(3):
                choices = bytes([7, 200, 0x5A, 33, 34])
                got = model.text_choose(text, choices, group)
                logits = model.byte_logits(text[:11] + bytes([stand_in]))[-1]
                expected = torch.softmax(logits[list(choices)] / temperatures[group], dim=0)
                assert torch.allclose(got, expected, atol=FORWARD_TOLERANCE, rtol=0)
                assert abs(float(got.sum()) - 1) < 1e-12
        # A subset's probabilities are the full set's, renormalised (one softmax, restricted).
        every = model.text_choose(b"question", bytes(range(256)), 1)
        subset = model.text_choose(b"question", bytes([9, 3, 250]), 1)
        assert torch.allclose(subset, every[[9, 3, 250]] / every[[9, 3, 250]].sum(), atol=1e-12, rtol=0)
    with pytest.raises(ValueError):
        model.text_choose(b"x", b"aa")
