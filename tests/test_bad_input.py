"""Bad input at every public entry point: a clear exception naming the problem, never a crash."""
import json
import os
import platform
import struct

import numpy as np
import pytest

import uform
from reference import safetensors_io

SHAPE = dict(depth=1, hidden=64, dimensions=16, context=32, token_width=0)


@pytest.fixture(scope="module")
def checkpoint(checkpoint_factory):
    return checkpoint_factory(**SHAPE)


@pytest.fixture(scope="module")
def model(checkpoint):
    return uform.Model.load_ram(checkpoint)


@pytest.fixture(scope="module")
def checkpoint_bytes(checkpoint):
    with open(checkpoint, "rb") as file:
        return file.read()


# ---- loading --------------------------------------------------------------------

def test_missing_file_is_file_error(tmp_path):
    with pytest.raises(uform.FileError, match="missing.safetensors"):
        uform.Model.load_ram(tmp_path / "missing.safetensors")
    with pytest.raises(FileNotFoundError.__mro__[1]):  # FileError is an OSError
        uform.Model.load_ram(str(tmp_path / "missing.safetensors"))


def test_directory_is_file_error(tmp_path):
    with pytest.raises(uform.FileError):
        uform.Model.load_ram(tmp_path)


def test_wrong_argument_types(checkpoint, checkpoint_bytes):
    with pytest.raises(uform.InvalidArgumentError, match="path"):
        uform.Model.load_ram(42)
    with pytest.raises(uform.InvalidArgumentError, match="path"):
        uform.Model.load_ram("a\0b")
    with pytest.raises(uform.InvalidArgumentError, match="buffer"):
        uform.Model.load_ram_buffer(checkpoint)        # a str is a path, not bytes
    with pytest.raises(uform.InvalidArgumentError, match="buffer"):
        uform.Model.load_ram_buffer(12345)
    with pytest.raises(uform.InvalidArgumentError, match="cpu_class"):
        uform.Model.load_ram(checkpoint, cpu_class=99)
    with pytest.raises(uform.InvalidArgumentError, match="quantization"):
        uform.Model.load_ram(checkpoint, quantization=77)
    with pytest.raises(uform.InvalidArgumentError, match="executor"):
        uform.Model.load_ram(checkpoint, executor="all cores")
    with pytest.raises(uform.InvalidArgumentError, match="progress"):
        uform.Model.load_ram(checkpoint, progress=3)
    with pytest.raises(uform.InvalidArgumentError, match="progress_steps"):
        uform.Model.load_ram(checkpoint, progress_steps=-1)
    with pytest.raises(uform.InvalidArgumentError, match="memory_domains"):
        uform.Model.load_ram(checkpoint, memory_domains=[0, 0])


def test_not_built_yet_is_unsupported(checkpoint, model):
    arena = uform.Arena()
    with pytest.raises(uform.InvalidArgumentError, match="not BF16 or E4M3"):
        uform.Model.load_ram(checkpoint, quantization=uform.Scalar.E5M2)
    # without a GPU the VRAM verbs refuse: UnsupportedError from a build without the CUDA
    # backend, DeviceError ("no GPU found") from one with it
    capabilities = uform.capabilities()
    refusal = uform.DeviceError if capabilities.gpu_backend and capabilities.gpus == 0 else uform.UnsupportedError
    if capabilities.gpus == 0:   # (with a GPU these load: tests/gpu)
        with pytest.raises(refusal, match="GPU"):
            uform.Model.load_vram(checkpoint)
        with pytest.raises(refusal, match="GPU"):
            uform.Model.load_vram_buffer(b"")
        with pytest.raises(refusal, match="GPU"):
            uform.Executor.for_vram([0])
    # checked before any GPU is asked for
    with pytest.raises(uform.InvalidArgumentError, match="got str"):
        uform.Model.load_vram_buffer(checkpoint)
    with pytest.raises(uform.InvalidArgumentError, match="gpu_class"):
        uform.Model.load_vram(checkpoint, gpu_class=99)
    # a text-only checkpoint: the media verbs name the missing parts
    for verb, modality in (("image_encode", "image"), ("image_encode_pixels", "image"),
                           ("video_encode", "video"), ("audio_encode", "audio")):
        with pytest.raises(uform.UnsupportedError, match=f"no {modality} parts"):
            getattr(model, verb)([], arena)
    with pytest.raises(uform.UnsupportedError, match="no audio parts"):
        model.audio_encode_samples([], 16000, arena)
    with pytest.raises(uform.UnsupportedError, match="no byte head"):   # built; this checkpoint lacks the head
        model.text_choose(["q"], ["ab"], arena)
    with pytest.raises(uform.UnsupportedError, match="token head"):
        model.text_encode(["x"], arena, outputs=uform.Outputs.TOKENS)
    with pytest.raises(refusal if capabilities.gpus == 0 else uform.InvalidArgumentError,
                       match="GPU" if capabilities.gpus == 0 else "executor"):
        uform.Trainer.init_vram(None)


ARM_CLASSES = [uform.CPUClass.NEON, uform.CPUClass.SVE, uform.CPUClass.NEON_BF16,
               uform.CPUClass.SVE_BF16]


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 only")
@pytest.mark.parametrize("cpu_class", ARM_CLASSES, ids=lambda c: c.name)
def test_cpu_class_the_machine_cannot_run(checkpoint, cpu_class):
    """An Arm class on an x86-64 build: UnsupportedError naming the class and the target."""
    with pytest.raises(uform.UnsupportedError, match=f"the {cpu_class.name.lower()} class is not built for x86-64"):
        uform.Model.load_ram(checkpoint, cpu_class=cpu_class)


def _rewrite(checkpoint_bytes, edit):
    """Parses the header, applies edit(header_dict, tensors_bytes) and re-serialises."""
    (length,) = struct.unpack("<Q", checkpoint_bytes[:8])
    header = json.loads(checkpoint_bytes[8:8 + length])
    data = checkpoint_bytes[8 + length:]
    data = edit(header, data) or data
    encoded = json.dumps(header).encode()
    return struct.pack("<Q", len(encoded)) + encoded + data


@pytest.mark.parametrize("case,pattern", [
    ("no_metadata", "uform"),
    ("bad_version", "version"),
    ("missing_tensor", "blocks.0.mlp.up.weight"),
    ("wrong_shape", "text.modality"),
    ("wrong_dtype", "I32"),
    ("bad_hidden", "hidden"),
    ("metadata_not_json", "uform"),
])
def test_inconsistent_checkpoints_are_format_errors(checkpoint_bytes, case, pattern):
    def edit(header, data):
        meta = json.loads(header["__metadata__"]["uform"])
        if case == "no_metadata":
            del header["__metadata__"]
        elif case == "bad_version":
            meta["version"] = 3
        elif case == "missing_tensor":
            # rename: the file stays well formed, the model lacks a part
            header["extra.weight"] = header.pop("blocks.0.mlp.up.weight")
        elif case == "wrong_shape":
            entry = header["text.modality"]
            entry["shape"] = [entry["shape"][0] // 2, 2]
        elif case == "wrong_dtype":
            entry = header["text.modality"]
            entry["dtype"], entry["shape"] = "I32", [entry["shape"][0] // 2]
        elif case == "bad_hidden":
            meta["hidden"] = 65
        if case == "metadata_not_json":
            header["__metadata__"]["uform"] = "{not json"
        elif "__metadata__" in header:
            header["__metadata__"]["uform"] = json.dumps(meta)
    with pytest.raises(uform.FormatError, match=pattern):
        uform.Model.load_ram_buffer(_rewrite(checkpoint_bytes, edit))


def test_non_finite_weights_are_format_errors(checkpoint_bytes):
    tensors, metadata = safetensors_io.deserialize(checkpoint_bytes)
    specs = {name: (dtype, value) for name, (dtype, value) in tensors.items()}
    dtype, value = specs["blocks.0.mlp.down.weight"]
    value = value.copy()
    value[3, 5] = np.nan
    specs["blocks.0.mlp.down.weight"] = (dtype, value)
    with pytest.raises(uform.FormatError, match="non-finite"):
        uform.Model.load_ram_buffer(safetensors_io.serialize(specs, metadata))


def test_fuzzed_checkpoints_never_crash(checkpoint_bytes):
    """2,000+ mutations. Truncations, insertions, deletions and header-length
    changes always break the file (safetensors data must exactly fill the file):
    FormatError every time. Byte overwrites inside the header may leave a valid
    file (a changed digit of `context`), so they must raise FormatError or load."""
    rng = np.random.default_rng(2026)
    data = bytearray(checkpoint_bytes)
    (header_length,) = struct.unpack("<Q", checkpoint_bytes[:8])
    header_end = 8 + header_length
    counts = {"format": 0, "loaded": 0}
    for iteration in range(2400):
        kind = iteration % 6
        mutated = bytearray(data)
        if kind == 0:      # truncate anywhere
            mutated = mutated[: int(rng.integers(0, len(data)))]
        elif kind == 1:    # insert a byte anywhere
            at = int(rng.integers(0, len(data)))
            mutated[at:at] = bytes([int(rng.integers(0, 256))])
        elif kind == 2:    # delete a run of bytes
            at = int(rng.integers(0, len(data) - 1))
            del mutated[at: at + int(rng.integers(1, 16))]
        elif kind == 3:    # a different header length
            new_length = header_length + int(rng.choice([-1, 1])) * int(rng.integers(1, 1 << 20))
            mutated[:8] = struct.pack("<q", new_length)
        else:              # overwrite 1-3 bytes of the header
            for _ in range(int(rng.integers(1, 4))):
                mutated[int(rng.integers(8, header_end))] = int(rng.integers(0, 256))
        try:
            uform.Model.load_ram_buffer(bytes(mutated))
        except uform.FormatError:
            counts["format"] += 1
            continue
        assert kind >= 4, f"mutation kind {kind} at iteration {iteration} loaded"
        counts["loaded"] += 1
    assert counts["format"] >= 2000


# ---- text_encode ------------------------------------------------------------------

def test_text_encode_wrong_inputs(model):
    arena = uform.Arena()
    cases = [
        (123, "texts"),
        ("a single string", "single str"),
        (b"single bytes", "single bytes"),
        ([b"ok", 7], r"texts\[1\]"),
        (["\ud800 lone surrogate"], r"texts\[0\]"),
        ([], "empty"),
        ((b"abc", np.array([0, 2, 1], dtype=np.uint64)), "decrease"),
        ((b"abc", np.array([0, 10], dtype=np.uint64)), "past"),
        ((b"abc", np.array([0, 2], dtype=np.uint32)), "64-bit|texts"),
        ((b"abc", np.array([], dtype=np.uint64)), "count"),
    ]
    for texts, pattern in cases:
        with pytest.raises(uform.InvalidArgumentError, match=pattern):
            model.text_encode(texts, arena)


def test_text_encode_wrong_keywords(model):
    arena = uform.Arena()
    with pytest.raises(uform.InvalidArgumentError, match="arena"):
        model.text_encode(["x"], "arena")
    with pytest.raises(uform.InvalidArgumentError, match="outputs"):
        model.text_encode(["x"], arena, outputs=0)
    with pytest.raises(uform.InvalidArgumentError, match="outputs"):
        model.text_encode(["x"], arena, outputs=8)
    with pytest.raises(uform.InvalidArgumentError, match="outputs_scalar"):
        model.text_encode(["x"], arena, outputs_scalar=42)
    with pytest.raises(uform.InvalidArgumentError, match="outputs_scalar"):
        model.text_encode(["x"], arena, outputs_scalar=-1)
    with pytest.raises(uform.InvalidArgumentError, match="outputs_scalar"):
        model.text_encode(["x"], arena, outputs_scalar="E5M2")      # a name is not a Scalar
    with pytest.raises(uform.InvalidArgumentError, match="stats"):
        model.text_encode(["x"], arena, stats={})
    with pytest.raises(TypeError):
        model.text_encode(["x"], arena, colour="blue")
    with pytest.raises(uform.InvalidArgumentError, match="executor"):
        model.on("cpu")
    # Every failure above left the model and the arena usable.
    assert model.text_encode(["x"], arena).embeddings.shape == (1, 16)


def test_huge_and_odd_texts(model):
    arena = uform.Arena()
    stats = uform.TextEncodeStats()
    huge = b"\xff" * (8 << 20)                    # 8 MiB: cut at context, counted
    encoded = model.text_encode([huge, b"\x00" * 5, b"\x80\x81 invalid utf-8"], arena, stats=stats)
    assert stats.truncated == 1 and stats.tokens == 32 + 5 + 16
    assert np.isfinite(np.asarray(encoded.embeddings)).all()


def test_executor_arguments():
    with pytest.raises(uform.InvalidArgumentError, match="threads"):
        uform.Executor.for_ram(-1)
    with pytest.raises(uform.InvalidArgumentError, match="threads"):
        uform.Executor.for_ram(10 ** 9)
    with pytest.raises(uform.InvalidArgumentError, match="memory_domains"):
        uform.Executor.for_ram(1, memory_domains="0")
    with pytest.raises(TypeError):
        uform.Executor()
    assert uform.Executor.for_ram(0).threads == len(os.sched_getaffinity(0))


def test_hostile_header_sizes_are_refused_before_allocating():
    # A header of 1.2 million tiny JSON values: refused by count, not parsed into gigabytes.
    header = b'{"a":[' + b"0," * 1_200_000 + b'0]}'
    with pytest.raises(uform.FormatError, match="values"):
        uform.Model.load_ram_buffer(struct.pack("<Q", len(header)) + header)
    # A declared header length of 2^63: refused from the 8 bytes alone.
    with pytest.raises(uform.FormatError, match="header"):
        uform.Model.load_ram_buffer(struct.pack("<Q", 1 << 63) + b"{}")
