"""A synthetic retrieval task that needs token-level matching, for late interaction.

A document is a list of `words` random made-up words (4 lowercase letters each); a query is
one of its words, alone:

    query: "kelv"   ->   document: "ropa kelv zimu tanq bofe ..."

Every split draws fresh words, so nothing can be memorised: a model must check whether the
query's letters occur, in order, somewhere in the document. Late interaction does exactly
that (each query token finds its best match among the document's tokens), while a single
pooled embedding must squeeze a dozen unrelated words into one vector, and loses most of
them as documents get longer.

    task = TokenMatchTask(words=12)
    queries, documents = task.split(100, seed=2)        # query i belongs to document i
    for texts, bags, sides in batches(task, pairs=32, seed=0): ...
"""
from __future__ import annotations

from typing import Iterator, List, Tuple

import numpy as np

QUERY, DOCUMENT = 1, 2   # uform.LateInteractionSide values


class TokenMatchTask:
    def __init__(self, words: int = 12, letters: int = 4) -> None:
        self.words = words
        self.letters = letters

    def _word(self, rng: np.random.Generator) -> str:
        return "".join(chr(ord("a") + int(c)) for c in rng.integers(0, 26, self.letters))

    def split(self, count: int, seed: int) -> Tuple[List[bytes], List[bytes]]:
        """(queries, documents): query i is a random word of document i."""
        rng = np.random.default_rng(seed)
        queries, documents = [], []
        for _ in range(count):
            words = [self._word(rng) for _ in range(self.words)]
            documents.append(" ".join(words).encode())
            queries.append(words[int(rng.integers(0, self.words))].encode())
        return queries, documents


def batches(task: TokenMatchTask, pairs: int, seed: int) -> Iterator[Tuple[List[bytes], List[int], List[int]]]:
    """Endless training batches: (texts, bags, sides), a query and its document per bag."""
    rng_seed = seed
    while True:
        queries, documents = task.split(pairs, seed=10_000 + rng_seed)
        rng_seed += 1
        texts, bags, sides = [], [], []
        for bag, (query, document) in enumerate(zip(queries, documents)):
            texts += [query, document]
            bags += [bag, bag]
            sides += [QUERY, DOCUMENT]
        yield texts, bags, sides


def recall_at_1(scores: np.ndarray) -> float:
    """scores [queries, documents], query i's right document being i."""
    return float(np.mean(np.argmax(scores, axis=1) == np.arange(len(scores))))
