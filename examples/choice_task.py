"""A synthetic multiple-choice task with two kinds of question, for calibrated choices.

Every question is a short string of random lowercase letters with exactly one of the capitals
A, B, C, D hidden in it, then a question mark; the right choice is that capital:

    qhzBkwtr?   ->   B

Questions come in two temperature groups that read alike but are labelled differently: in
group 0 the label is always the right answer; in group 1 it is replaced, with probability
`noise` (0.6 by default), by a uniformly random letter (possibly the right one again), so
there the best possible forecast gives the right letter 1 - noise + noise / 4 = 0.55 and
each other letter 0.15. A model cannot tell the groups apart from the text: only the learned
per-group temperature of text_choose (docs/training.md section 10) can make it confident on
group 0 and cautious on group 1 at once. With one temperature for both, it must compromise
and is miscalibrated on both.

Everything is a pure function of the seeds:

    task = ChoiceTask(noise=0.6)
    train = task.split(20000, seed=1)
    test = task.split(400, seed=2)
    train.texts, train.groups, train.labels (the sampled, possibly noisy, labels)
    expected_calibration_error(probabilities, test) (against each group's label distribution)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

import numpy as np

CHOICES = "ABCD"


@dataclass
class ChoiceSplit:
    texts: List[bytes]
    answers: np.ndarray   # [n] index of the right letter
    groups: np.ndarray    # [n] 0: clean labels, 1: noisy labels
    labels: np.ndarray    # [n] the sampled label (what training sees)
    noise: float

    def targets(self) -> List[np.ndarray]:
        """One-hot float32 targets of the sampled labels, one buffer per question."""
        return [np.eye(len(CHOICES), dtype=np.float32)[label] for label in self.labels]

    def label_distribution(self) -> np.ndarray:
        """[n, 4]: the probability of each label given the question (the ideal forecast)."""
        out = np.zeros((len(self.texts), len(CHOICES)))
        for i, (answer, group) in enumerate(zip(self.answers, self.groups)):
            noise = self.noise if group == 1 else 0.0
            out[i, :] = noise / len(CHOICES)
            out[i, answer] += 1.0 - noise
        return out


class ChoiceTask:
    def __init__(self, noise: float = 0.6, length: tuple = (6, 14)) -> None:
        self.noise = noise
        self.length = length

    def split(self, count: int, seed: int) -> ChoiceSplit:
        rng = np.random.default_rng(seed)
        texts, answers, groups, labels = [], [], [], []
        for _ in range(count):
            n = int(rng.integers(self.length[0], self.length[1] + 1))
            letters = [chr(ord("a") + int(c)) for c in rng.integers(0, 26, n)]
            answer = int(rng.integers(0, len(CHOICES)))
            letters.insert(int(rng.integers(0, n + 1)), CHOICES[answer])
            group = int(rng.integers(0, 2))
            label = answer
            if group == 1 and rng.random() < self.noise:
                label = int(rng.integers(0, len(CHOICES)))
            texts.append(("".join(letters) + "?").encode())
            answers.append(answer)
            groups.append(group)
            labels.append(label)
        return ChoiceSplit(texts, np.array(answers), np.array(groups, np.uint32), np.array(labels),
                           self.noise)


def accuracy(probabilities: np.ndarray, split: ChoiceSplit) -> float:
    """Share of questions whose most probable choice is the right letter."""
    return float(np.mean(np.argmax(probabilities, axis=1) == split.answers))


def expected_calibration_error(probabilities: np.ndarray, split: ChoiceSplit, bins: int = 10) -> float:
    """ECE of the top choice: questions binned by confidence; in each bin, the gap between the
    mean confidence and the mean probability that the label equals the top choice (known
    exactly from the label distribution, so no sampling noise), weighted by the bin's share."""
    top = np.argmax(probabilities, axis=1)
    confidence = probabilities[np.arange(len(top)), top]
    correct = split.label_distribution()[np.arange(len(top)), top]
    edges = np.minimum((confidence * bins).astype(int), bins - 1)
    error = 0.0
    for b in range(bins):
        inside = edges == b
        if inside.any():
            error += inside.mean() * abs(confidence[inside].mean() - correct[inside].mean())
    return float(error)
