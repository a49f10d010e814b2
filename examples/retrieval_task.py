"""A synthetic text retrieval task that a tiny byte-level encoder learns in under a minute.

A world of made-up people: each has a name, a home town, a trade, a favourite food and a pet,
every word built from random syllables. A *document* describes one person: the name, then
one clause per attribute, each in one of three wordings, in a shuffled order. A *query*
names three of the person's four attributes in another wording, never the name, and among
the documents it is asked against exactly one person has all three:

    which pawid in zimi likes pafa?   ->   Kaxuh Rifesa: a pawid; food: pafa; home: zimi; has a kodo.

The vocabulary (16 words per attribute) is shared by every split; the people are not. An
evaluation split holds attribute combinations that no training person has (and fresh names),
so a model that does well on it has learnt to read the attribute words and match them across
wordings, not memorised documents. For each held-out query, about two other documents of 200
share two of its three words, so near misses abound. An untrained encoder (its mean-pooled
states are close to a bag of bytes) finds the right document for 6 to 8 queries in 100
(task seeds 0 to 3), against a chance level of 1 in 200.

Everything is a pure function of the seeds:

    task = RetrievalTask(seed=0)
    test = task.split(200, seed=2)                                   # held out, distinct
    train = task.split(60000, seed=1, exclude=test, distinct=False)  # other combinations
    for texts, bags in batches(train, pairs=32, seed=0, neighbours=3): ...
    recall_at_1(query_embeddings, document_embeddings)

`asked=(2, 3)` also draws queries naming only two attributes: a harder task (one shared
word is then half the evidence), on which the run of tests/test_training_learns.py reaches
about 0.74 held-out recall@1 rather than 0.94.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

ATTRIBUTES = ("town", "trade", "food", "pet")

# Query wordings by the attributes they name; "{town}" etc. are filled with the person's words.
QUERY_TEMPLATES: Dict[Tuple[str, ...], Tuple[str, ...]] = {
    ("town", "trade"): ("which {trade} is from {town}?", "the {trade} of {town}",
                        "find the {trade} living in {town}"),
    ("town", "food"): ("who in {town} eats {food}?", "someone from {town} fond of {food}",
                       "{town} resident, likes {food}"),
    ("town", "pet"): ("who in {town} has a {pet}?", "{town} person with a pet {pet}",
                      "the {pet} owner from {town}"),
    ("trade", "food"): ("which {trade} eats {food}?", "a {trade} who loves {food}",
                        "{food}-loving {trade}"),
    ("trade", "pet"): ("which {trade} keeps a {pet}?", "the {trade} with a {pet}",
                       "{pet} owner, works as {trade}"),
    ("food", "pet"): ("who feeds {food} to a {pet}?", "{pet} owner who likes {food}",
                      "someone with a {pet} eating {food}"),
    ("town", "trade", "food"): ("a {trade} from {town} who eats {food}",
                                "which {trade} in {town} likes {food}?"),
    ("town", "trade", "pet"): ("the {trade} from {town} with a {pet}",
                               "{town} {trade} who keeps a {pet}"),
    ("town", "food", "pet"): ("who in {town} eats {food} and has a {pet}?",
                              "{pet} owner in {town} fond of {food}"),
    ("trade", "food", "pet"): ("the {trade} with a {pet}, likes {food}",
                               "which {trade} eats {food} and owns a {pet}?"),
}

# Document clauses, one per attribute, joined in a shuffled order after the name.
DOCUMENT_CLAUSES: Dict[str, Tuple[str, ...]] = {
    "town": ("lives in {town}", "from {town}", "home: {town}"),
    "trade": ("works as a {trade}", "a {trade}", "job: {trade}"),
    "food": ("eats {food}", "likes {food}", "food: {food}"),
    "pet": ("owns a {pet}", "has a {pet}", "pet: {pet}"),
}

CONSONANTS = "bcdfghjklmnprstvwxz"
VOWELS = "aeiou"

_Key = Tuple[Tuple[int, str], ...]  # what a query asks: (attribute index, value) pairs


def _word(rng: np.random.Generator, syllables: int) -> str:
    """Consonant-vowel syllables, then a final consonant half of the time: "kodo", "nozal"."""
    word = "".join(CONSONANTS[rng.integers(len(CONSONANTS))] + VOWELS[rng.integers(len(VOWELS))]
                   for _ in range(syllables))
    return word if rng.random() < 0.5 else word + CONSONANTS[rng.integers(len(CONSONANTS))]


def _key(kind: Sequence[str], combo: Sequence[str]) -> _Key:
    return tuple((ATTRIBUTES.index(a), combo[ATTRIBUTES.index(a)]) for a in kind)


def _matches(key: _Key, combo: Sequence[str]) -> bool:
    """Whether a person with attribute values `combo` fits everything a query asks."""
    return all(combo[i] == value for i, value in key)


@dataclass
class Split:
    """Pairs of one split: queries[i] asks for documents[i], about people[i] =
    (name, town, trade, food, pet), naming the attributes asked[i]."""

    queries: List[str]
    documents: List[str]
    people: List[Tuple[str, ...]]
    asked: List[Tuple[str, ...]]

    def __len__(self) -> int:
        return len(self.queries)


class RetrievalTask:
    """The vocabulary and the wordings, fixed by `seed`: values_per_attribute words of
    `syllables` syllables per attribute; queries name `asked` attributes (counts, 2 or 3)."""

    def __init__(self, seed: int = 0, *, values_per_attribute: int = 16, asked: Sequence[int] = (3,),
                 syllables: int = 2) -> None:
        self.kinds = [kind for kind in QUERY_TEMPLATES if len(kind) in asked]
        if not self.kinds:
            raise ValueError(f"asked: {asked!r} names no query kind (counts 2 and 3 exist)")
        rng = np.random.default_rng([seed, 0x7A5C])
        used: set = set()
        self.values: Dict[str, List[str]] = {}
        for attribute in ATTRIBUTES:
            words: List[str] = []
            while len(words) < values_per_attribute:
                word = _word(rng, syllables)
                if word not in used:
                    used.add(word)
                    words.append(word)
            self.values[attribute] = words

    def split(self, count: int, seed: int, *, exclude: Optional[Split] = None, distinct: bool = True) -> Split:
        """`count` new people with fresh made-up names, none with the attribute values of a
        person of `exclude`, each with one query and one document. With `distinct` (for
        evaluation) people differ in their attribute values, and every query fits exactly
        one person of the split; without it (for training, see batches()) neither holds."""
        rng = np.random.default_rng([seed, 0x5E1F])
        excluded = {p[1:] for p in exclude.people} if exclude else set()
        seen: set = set()
        people: List[Tuple[str, ...]] = []
        asked: List[Tuple[str, ...]] = []
        keys: List[_Key] = []
        while len(people) < count:
            combo = tuple(self.values[a][rng.integers(len(self.values[a]))] for a in ATTRIBUTES)
            kind = self.kinds[rng.integers(len(self.kinds))]
            if combo in excluded:
                continue
            if distinct:
                key = _key(kind, combo)
                if combo in seen or any(_matches(key, p[1:]) for p in people) or \
                        any(_matches(k, combo) for k in keys):
                    continue
                seen.add(combo)
                keys.append(key)
            name = _word(rng, 2).capitalize() + " " + _word(rng, 3).capitalize()
            people.append((name,) + combo)
            asked.append(kind)
        documents = [self._document(rng, person) for person in people]
        queries = [self._query(rng, person, kind) for person, kind in zip(people, asked)]
        return Split(queries=queries, documents=documents, people=people, asked=asked)

    @staticmethod
    def _fill(template: str, person: Sequence[str]) -> str:
        return template.format(**{a: person[1 + i] for i, a in enumerate(ATTRIBUTES)})

    def _document(self, rng: np.random.Generator, person: Sequence[str]) -> str:
        clauses = [self._fill(DOCUMENT_CLAUSES[ATTRIBUTES[i]][rng.integers(3)], person)
                   for i in rng.permutation(len(ATTRIBUTES))]
        return f"{person[0]}: " + "; ".join(clauses) + "."

    def _query(self, rng: np.random.Generator, person: Sequence[str], kind: Tuple[str, ...]) -> str:
        templates = QUERY_TEMPLATES[kind]
        return self._fill(templates[rng.integers(len(templates))], person)


def batches(split: Split, pairs: int, seed: int, *, neighbours: int = 0) -> Iterator[Tuple[List[str], List[int]]]:
    """Endless shuffled batches of `pairs` (query, document) pairs as (texts, bags), with
    texts = [query 0, document 0, query 1, document 1, ...] and bags = [0, 0, 1, 1, ...].

    A batch never holds a second document that one of its queries fits (a false negative):
    such a pair waits for the next batch. With neighbours > 0, each person drawn brings up
    to that many others sharing two of its attribute values: hard negatives, which a random
    batch of a few dozen pairs rarely holds but a few hundred held-out documents do."""
    rng = np.random.default_rng([seed, 0xBA7C])
    people = [person[1:] for person in split.people]
    keys = [_key(kind, combo) for kind, combo in zip(split.asked, people)]
    two = [(a, b) for a in range(len(ATTRIBUTES)) for b in range(a + 1, len(ATTRIBUTES))]
    sharing: Dict[tuple, List[int]] = {}
    if neighbours:
        for i, combo in enumerate(people):
            for a, b in two:
                sharing.setdefault((a, b, combo[a], combo[b]), []).append(i)

    def fits(i: int, chosen: List[int]) -> bool:  # False for a person already chosen, too
        return not any(_matches(keys[i], people[j]) or _matches(keys[j], people[i]) for j in chosen)

    queue: deque = deque()
    bags = [i // 2 for i in range(2 * pairs)]
    while True:
        chosen: List[int] = []
        skipped: List[int] = []
        while len(chosen) < pairs:
            if not queue:
                queue.extend(rng.permutation(len(split)).tolist())
            i = queue.popleft()
            if not fits(i, chosen):
                skipped.append(i)
                continue
            chosen.append(i)
            for _ in range(neighbours):
                if len(chosen) == pairs:
                    break
                a, b = two[rng.integers(len(two))]
                near = sharing[(a, b, people[i][a], people[i][b])]
                j = near[rng.integers(len(near))]
                if fits(j, chosen):
                    chosen.append(j)
        queue.extendleft(reversed(skipped))
        yield [text for i in chosen for text in (split.queries[i], split.documents[i])], bags


def recall_at_1(queries: np.ndarray, documents: np.ndarray) -> float:
    """The fraction of queries whose most similar document (dot product of unit rows) is
    their own, query i -> document i."""
    scores = np.asarray(queries, dtype=np.float32) @ np.asarray(documents, dtype=np.float32).T
    return float(np.mean(np.argmax(scores, axis=1) == np.arange(len(scores))))


if __name__ == "__main__":
    task = RetrievalTask(seed=0)
    sample = task.split(8, seed=1)
    for query, document in zip(sample.queries, sample.documents):
        print(f"{query:<44} -> {document}")
