"""What every benchmark script shares without PyTorch: the texts it encodes and the
hand-written sections a report generator carries over when it rewrites its page.
bench/harness.py re-exports both; bench/gpu_report.py, which must run where torch is
missing, imports them from here."""
from __future__ import annotations

import numpy as np

TEXT_BYTES = (64, 512)        # lengths uniform in [64, 512], printable ASCII


def make_texts(count: int, seed: int, text_bytes: tuple = TEXT_BYTES) -> list[bytes]:
    """Deterministic random printable-ASCII texts, lengths uniform in text_bytes (inclusive)."""
    rng = np.random.default_rng(seed)
    low, high = text_bytes
    lengths = rng.integers(low, high + 1, size=count)
    return [bytes(rng.integers(32, 127, size=int(n), dtype=np.uint8)) for n in lengths]


def kept_section(path: str, heading: str) -> str:
    """Everything of the page at `path` from `heading` on (with a blank line before it), or
    "" when the page or the heading is missing: hand-written sections a report generator
    carries over. Read it before opening the page for writing, which empties it."""
    try:
        with open(path) as file:
            old = file.read()
    except OSError:
        return ""
    at = old.find(heading)
    return "\n" + old[at:] if at >= 0 else ""
