"""A synthetic text retrieval task that a tiny byte-level encoder can learn in a minute.

A world of made-up people: each has a name, a home town, a trade, a favourite food and a pet,
every word built from random syllables. A *document* describes one person, in one of several
sentence templates with the attributes in shuffled order. A *query* paraphrases part of it: it
names two or three of the person's attributes in another wording ("which mibo in zorvat keeps
a tulax?"), never the name, and among the documents it is asked against, exactly one person
has all the attributes it names.

The vocabulary is shared by every split, but the people, and the attribute combinations their
queries ask about, are new in each split: a model that does well on held-out pairs has learnt
to read attribute words and match them across wordings, not memorised the training documents.

Everything is a pure function of the seeds:

    task = RetrievalTask(seed=0)                    # the vocabulary and templates
    train = task.split(2000, seed=1)                # (queries, documents), query i -> document i
    test = task.split(200, seed=2, exclude=train)   # people and asked combinations unseen in train
    recall_at_1(query_embeddings, document_embeddings)
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
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
    ("town", "trade", "food"): ("a {trade} from {town} who eats {food}", "which {trade} in {town} likes {food}?"),
    ("town", "trade", "pet"): ("the {trade} from {town} with a {pet}", "{town} {trade} who keeps a {pet}"),
    ("town", "food", "pet"): ("who in {town} eats {food} and has a {pet}?", "{pet} owner in {town} fond of {food}"),
    ("trade", "food", "pet"): ("the {trade} with a {pet}, likes {food}", "which {trade} eats {food} and owns a {pet}?"),
}

# Document sentences: one clause per attribute, joined in a shuffled order after the name.
DOCUMENT_CLAUSES: Dict[str, Tuple[str, ...]] = {
    "town": ("lives in {town}", "home: {town}", "resides at {town}"),
    "trade": ("works as a {trade}", "job: {trade}", "is a {trade} by trade"),
    "food": ("favourite food is {food}", "food: {food}", "enjoys {food}"),
    "pet": ("owns a {pet}", "pet: {pet}", "has a {pet} at home"),
}

CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"


def _word(rng: np.random.Generator, syllables: int) -> str:
    return "".join(CONSONANTS[rng.integers(len(CONSONANTS))] + VOWELS[rng.integers(len(VOWELS))]
                   for _ in range(syllables)) + ("" if rng.random() < 0.5 else CONSONANTS[rng.integers(len(CONSONANTS))])


def _key(kind: Sequence[str], combo: Sequence[str]) -> Tuple[Tuple[int, str], ...]:
    """What a query of `kind` about attributes `combo` asks: (attribute index, value) pairs."""
    return tuple((ATTRIBUTES.index(a), combo[ATTRIBUTES.index(a)]) for a in kind)


def _matches(key: Sequence[Tuple[int, str]], combo: Sequence[str]) -> bool:
    return all(combo[i] == value for i, value in key)


@dataclass
class Split:
    """Pairs of one split: queries[i] asks for documents[i]; people[i] is its (name, *attributes)."""

    queries: List[str]
    documents: List[str]
    people: List[Tuple[str, ...]]
    asked: List[Tuple[str, ...]] = field(default_factory=list)  # the attributes queries[i] names

    def __len__(self) -> int:
        return len(self.queries)


class RetrievalTask:
    """The vocabulary (values_per_attribute words per attribute) and the wordings, fixed by seed."""

    def __init__(self, seed: int = 0, values_per_attribute: int = 16, asked: Sequence[int] = (2, 3)) -> None:
        self.kinds = [kind for kind in QUERY_TEMPLATES if len(kind) in asked]
        rng = np.random.default_rng([seed, 0x7A5C])
        used: set = set()
        self.values: Dict[str, List[str]] = {}
        for attribute in ATTRIBUTES:
            words: List[str] = []
            while len(words) < values_per_attribute:
                word = _word(rng, 2)
                if word not in used:
                    used.add(word)
                    words.append(word)
            self.values[attribute] = words
        self._vocabulary = used

    def _name(self, rng: np.random.Generator, taken: set) -> str:
        while True:
            name = _word(rng, 2).capitalize() + " " + _word(rng, 3).capitalize()
            if name not in taken and name.lower().split()[0] not in self._vocabulary:
                taken.add(name)
                return name

    def split(self, count: int, seed: int, exclude: Optional[Split] = None, distinct: bool = True) -> Split:
        """count new people (new names and attribute combinations; none of exclude's), each
        with one query. With distinct, every query singles its person out within the split,
        as an evaluation set needs; a training split leaves that to batches()."""
        rng = np.random.default_rng([seed, 0x5E1F])
        taken = set(p[0] for p in exclude.people) if exclude else set()
        combos = set(p[1:] for p in exclude.people) if exclude else set()
        kinds = self.kinds
        people: List[Tuple[str, ...]] = []
        asked: List[Tuple[str, ...]] = []
        keys: List[Tuple[Tuple[int, str], ...]] = []
        while len(people) < count:
            combo = tuple(self.values[a][rng.integers(len(self.values[a]))] for a in ATTRIBUTES)
            if combo in combos:
                continue
            kind = kinds[rng.integers(len(kinds))]
            key = _key(kind, combo)
            if distinct and (any(_matches(key, p[1:]) for p in people) or any(_matches(k, combo) for k in keys)):
                continue
            combos.add(combo)
            keys.append(key)
            people.append((self._name(rng, taken),) + combo)
            asked.append(kind)
        documents = [self._document(rng, person) for person in people]
        queries = [self._query(rng, person, kind) for person, kind in zip(people, asked)]
        return Split(queries=queries, documents=documents, people=people, asked=asked)

    def _fill(self, template: str, person: Sequence[str]) -> str:
        return template.format(**{a: person[1 + i] for i, a in enumerate(ATTRIBUTES)})

    def _document(self, rng: np.random.Generator, person: Sequence[str]) -> str:
        order = rng.permutation(len(ATTRIBUTES))
        clauses = [self._fill(DOCUMENT_CLAUSES[ATTRIBUTES[i]][rng.integers(3)], person) for i in order]
        return f"{person[0]}: " + "; ".join(clauses) + "."

    def _query(self, rng: np.random.Generator, person: Sequence[str], kind: Tuple[str, ...]) -> str:
        templates = QUERY_TEMPLATES[kind]
        return self._fill(templates[rng.integers(len(templates))], person)


def batches(split: Split, pairs: int, seed: int) -> Iterator[Tuple[List[str], List[int]]]:
    """Endless shuffled batches of `pairs` (query, document) pairs as (texts, bags): texts
    are the queries then their documents, and bags pair query i with document i. A batch
    never holds a second document that one of its queries also describes (it would be a
    false negative): such a pair waits for the next batch."""
    rng = np.random.default_rng([seed, 0xBA7C])
    keys = [_key(kind, person[1:]) for kind, person in zip(split.asked, split.people)]
    queue: deque = deque()
    bags = list(range(pairs)) * 2
    while True:
        chosen: List[int] = []
        skipped: List[int] = []
        while len(chosen) < pairs:
            if not queue:
                queue.extend(rng.permutation(len(split)).tolist())
            i = queue.popleft()
            combo = split.people[i][1:]
            if any(_matches(keys[i], split.people[j][1:]) or _matches(keys[j], combo) for j in chosen):
                skipped.append(i)  # also a person already chosen: its key matches itself
            else:
                chosen.append(i)
        queue.extendleft(reversed(skipped))
        yield [split.queries[i] for i in chosen] + [split.documents[i] for i in chosen], bags


def recall_at_1(queries: np.ndarray, documents: np.ndarray) -> float:
    """The fraction of queries whose most similar document (by dot product of unit rows) is
    their own: query i -> document i."""
    scores = np.asarray(queries, dtype=np.float32) @ np.asarray(documents, dtype=np.float32).T
    return float(np.mean(np.argmax(scores, axis=1) == np.arange(len(scores))))


if __name__ == "__main__":
    task = RetrievalTask(seed=0)
    sample = task.split(8, seed=1)
    for query, document in zip(sample.queries, sample.documents):
        print(f"{query:<44} -> {document}")
