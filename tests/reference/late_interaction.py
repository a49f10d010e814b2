"""Late interaction (MaxSim, as ColBERT) in float64, written from the definition:

    score(q, d) = mean over the query's token vectors q_i of max over the document's
                  token vectors d_j of <q_i, d_j>,   0 when q or d has no vectors.

The oracle of uform.late_interaction_scores. Items are lists of [rows, width] arrays;
`decode_rows` turns rows as an encode call stores them (F32, BF16 bits, F16, I8) into the
float64 values they stand for.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .safetensors_io import bf16_bits_to_f32


def decode_rows(rows: np.ndarray, scalar: str) -> np.ndarray:
    """The values stored rows stand for, float64: BF16 rows are uint16 bit patterns, I8
    rows hold round(x * 127)."""
    rows = np.asarray(rows)
    if scalar == "F32":
        return rows.astype(np.float64)
    if scalar == "BF16":
        return bf16_bits_to_f32(rows).astype(np.float64)
    if scalar == "F16":
        return rows.astype(np.float16).astype(np.float64)
    if scalar == "I8":
        return rows.astype(np.int8).astype(np.float64) / 127.0
    raise ValueError(f"no dot product over {scalar} rows")


def split(rows: np.ndarray, offsets: Sequence[int]) -> list[np.ndarray]:
    """Item i's rows: rows[offsets[i]:offsets[i + 1]]."""
    return [rows[int(offsets[i]):int(offsets[i + 1])] for i in range(len(offsets) - 1)]


def late_interaction_scores(queries: Sequence[np.ndarray],
                            documents: Sequence[np.ndarray]) -> np.ndarray:
    """float64 [len(queries), len(documents)] MaxSim scores."""
    scores = np.zeros((len(queries), len(documents)), dtype=np.float64)
    for q, query in enumerate(queries):
        query = np.asarray(query, dtype=np.float64)
        if len(query) == 0:
            continue
        for d, document in enumerate(documents):
            document = np.asarray(document, dtype=np.float64)
            if len(document) == 0:
                continue
            products = query @ document.T              # [query rows, document rows]
            scores[q, d] = products.max(axis=1).mean()
    return scores
