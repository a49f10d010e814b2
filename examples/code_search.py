"""make demo, part 3: code search over the Python standard library, against BM25.

Real data this time. The pairs come from the `.py` files of the standard library installed
on this machine (`sysconfig.get_paths()["stdlib"]`, without site-packages and without test
suites), parsed with `ast`:

    query     the first sentence of a function's docstring     "Return the number of ..."
    document  the function's source, dedented, with its docstring (and those of functions
              and classes nested in it) and blank lines removed, cut to --context bytes

Functions whose summary is under 4 words or 20 characters, whose body is only the docstring
(or `pass`, `...`, `raise NotImplementedError`), or whose summary or document occurs more than
once (`__repr__`s, copies across modules) are left out, so every query has exactly one right
document. The split is by top-level module or package: walking the names in the order of
their SHA-256, a module is held out whole when its pairs still fit in --held-out (20%) of all
pairs, so no held-out function's module (nor any module of its package) was seen in
training, and the split is the same on every run of a given Python version.

A byte-level encoder (no tokenizer: identifiers and punctuation are read as bytes) is trained
with the CONTRASTIVE objective on (query, document) pairs of the training modules, saved,
loaded back with Model.load_ram, and searched over every held-out document with text_encode.
Side by side: the same model at step 0 (the save before the first step) and Okapi BM25 over
the same held-out documents (k1 1.2, b 0.75; tokens: the ASCII letter and digit runs,
split at camelCase humps and snake_case underscores, lowercased, no stemming, no stop
words), and the two together (the sum of each query's standardised BM25 scores and cosines,
equal weights). Ranks count ties against the right document, so a query with no word in
common with any document does not luck into rank 1.

CONTRASTIVE rather than JOINT: the task is query -> document retrieval, which is what the
contrastive term scores; JOINT adds masked-byte modelling of the same items, and its
embeddings pool the corrupted bytes, which in a short run on this data cost more than they
gave (docs/demo.md: MRR 0.109 against 0.147 after 1000 steps, and each step 10% slower).

    python3 examples/code_search.py            # make demo's run: 1000 steps, under 3 minutes on 2 cores
    python3 examples/code_search.py --steps 4000 --eval-at 250,500,1000,2000,3000   # docs/demo.md's curve
    python3 examples/code_search.py --help

docs/demo.md has the numbers, the times and a longer run's curve.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import math
import os
import re
import sys
import sysconfig
import textwrap
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, ROOT)

import uform  # noqa: E402

TEXT = uform.Modality.TEXT

QUERY_BYTES = 128                   # a summary is cut to this many bytes (few are longer)
MIN_WORDS, MIN_CHARS = 4, 20        # shorter summaries are too generic to search with
SKIPPED_DIRECTORIES = {"site-packages", "test", "tests", "idle_test", "__pycache__", "turtledemo"}
TRIVIAL_BODIES = {"pass", "...", "raise NotImplementedError", "raise NotImplementedError()"}


# ---- the pairs ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Pair:
    top: str        # the top-level module or package: the unit of the split
    name: str       # module.Class.function, for printing
    query: str      # the docstring's first sentence
    source: str     # the function without docstrings or blank lines, not cut
    document: bytes  # source as UTF-8, cut to the context


def stdlib_directory() -> Optional[str]:
    """The standard library's sources, or None when this Python has none (a .pyc-only install)."""
    path = sysconfig.get_paths().get("stdlib")
    if not path or not os.path.isfile(os.path.join(path, "os.py")):
        return None
    return path


def source_files(stdlib: str, tops: Optional[Sequence[str]] = None) -> List[Tuple[str, str, str]]:
    """(top-level name, dotted module, path) of every .py file, sorted by path; test suites,
    site-packages and turtledemo are left out; with `tops`, only those top-level names."""
    found = []
    for directory, subdirectories, files in os.walk(stdlib):
        subdirectories[:] = sorted(d for d in subdirectories
                                   if d not in SKIPPED_DIRECTORIES and "-" not in d and "." not in d)
        relative = os.path.relpath(directory, stdlib)
        parts = [] if relative == "." else relative.split(os.sep)
        if parts and not os.path.isfile(os.path.join(directory, "__init__.py")):
            subdirectories[:] = []  # not a package (e.g. lib-dynload, config-3.x)
            continue
        for file in sorted(files):
            if not file.endswith(".py") or file.startswith("test_") or "-" in file:
                continue
            stem = file[:-3]
            module = ".".join(parts + ([] if stem == "__init__" else [stem]))
            top = module.split(".")[0]
            if top and (tops is None or top in tops):
                found.append((top, module, os.path.join(directory, file)))
    return sorted(found, key=lambda entry: entry[2])


def summary(docstring: str) -> Optional[str]:
    """The first sentence of the first paragraph, on one line; None when too short."""
    paragraph = " ".join(docstring.strip().split("\n\n")[0].split())
    match = re.match(r"(.+?[.!?])(\s|$)", paragraph)
    sentence = match.group(1) if match else paragraph
    if len(sentence) < MIN_CHARS or len(sentence.split()) < MIN_WORDS:
        return None
    return sentence


def _docstring_lines(node: ast.AST) -> Optional[Tuple[int, int]]:
    """The 1-based line range of a def's or class's docstring, if it has one."""
    body = getattr(node, "body", None)
    if not body or not isinstance(body[0], ast.Expr) or not isinstance(body[0].value, ast.Constant) \
            or not isinstance(body[0].value.value, str):
        return None
    return body[0].lineno, body[0].end_lineno


def functions(path: str, module: str) -> Iterator[Tuple[str, str, str]]:
    """(qualified name, summary, source without docstrings) of the file's documented functions."""
    try:
        with open(path, "rb") as file:
            text = file.read().decode("utf-8")
        tree = ast.parse(text, filename=path)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return
    lines = text.splitlines()
    definitions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

    def visit(node: ast.AST, prefix: str) -> Iterator[Tuple[str, str, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, definitions):
                name = f"{prefix}.{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found = document(child)
                    if found:
                        yield (name,) + found
                yield from visit(child, name)
            else:
                yield from visit(child, prefix)

    def document(node: ast.AST) -> Optional[Tuple[str, str]]:
        docstring = ast.get_docstring(node)
        sentence = summary(docstring) if docstring else None
        if sentence is None or len(node.body) < 2:
            return None
        rest = ast.unparse(node.body[1]) if len(node.body) == 2 else ""
        if rest in TRIVIAL_BODIES:
            return None
        start, end = node.lineno, node.end_lineno  # from the `def` line: decorators left out
        removed = set()
        for inner in ast.walk(node):
            if isinstance(inner, definitions):
                span = _docstring_lines(inner)
                if span is None:
                    continue
                first, last = span
                # A docstring sharing a line with code (`def f(): "doc"`) cannot be cut by lines.
                # (ast's columns count UTF-8 bytes.)
                head = lines[first - 1].encode()[:inner.body[0].col_offset]
                tail = lines[last - 1].encode()[inner.body[0].end_col_offset:]
                if first <= inner.lineno or head.strip() or tail.strip(b" \t;"):
                    return None
                removed.update(range(first, last + 1))
        kept = [lines[i - 1].rstrip() for i in range(start, end + 1) if i not in removed]
        source = textwrap.dedent("\n".join(line for line in kept if line.strip()))
        return sentence, source

    yield from visit(tree, module)


def collect(stdlib: str, context: int, tops: Optional[Sequence[str]] = None) -> List[Pair]:
    """Every usable pair, in file order, without duplicated queries or documents."""
    pairs = []
    for top, module, path in source_files(stdlib, tops):
        for name, query, source in functions(path, module):
            document = source.encode("utf-8")[:context]
            pairs.append(Pair(top, name, query.encode("utf-8")[:QUERY_BYTES].decode("utf-8", "ignore"),
                              source, document))
    queries = Counter(p.query.lower() for p in pairs)
    documents = Counter(p.document for p in pairs)
    sources = Counter(p.source for p in pairs)
    return [p for p in pairs
            if queries[p.query.lower()] == 1 and documents[p.document] == 1 and sources[p.source] == 1]


def module_order(top: str) -> bytes:
    """Where a top-level module comes in the order the split walks: SHA-256 of its name."""
    return hashlib.sha256(top.encode()).digest()


def held_out_modules(pairs: Sequence[Pair], share: float) -> List[str]:
    """Whole top-level modules, in SHA-256 order of their names, each taken when its pairs still
    fit in `share` of all pairs: the held-out set holds about that share and never splits a
    module, and the choice is the same on every run of a given Python version."""
    sizes = Counter(p.top for p in pairs)
    budget, chosen = share * len(pairs), []
    for top in sorted(sizes, key=module_order):
        if sizes[top] <= budget:
            chosen.append(top)
            budget -= sizes[top]
    return sorted(chosen)


def split(pairs: Sequence[Pair], share: float) -> Tuple[List[Pair], List[Pair]]:
    """(training pairs, held-out pairs), the held-out ones from held_out_modules()."""
    held = set(held_out_modules(pairs, share))
    return [p for p in pairs if p.top not in held], [p for p in pairs if p.top in held]


# ---- BM25 and the metrics -----------------------------------------------------------------

_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def words(text: str) -> List[str]:
    """Letter and digit runs (so snake_case splits at `_`), split at camelCase humps, lowercased:
    "getHTTPResponse_code2" -> get, http, response, code, 2."""
    return [piece.lower() for run in re.findall(r"[A-Za-z0-9]+", text) for piece in _CAMEL.findall(run)]


def bm25_scores(queries: Sequence[str], documents: Sequence[str], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    """Okapi BM25 [queries, documents], each query term counted as often as it occurs,
    idf = ln(1 + (N - df + 0.5) / (df + 0.5)) (Lucene's, never negative)."""
    tokenised = [words(d) for d in documents]
    lengths = np.array([len(t) for t in tokenised], dtype=np.float64)
    norm = k1 * (1 - b + b * lengths / max(lengths.mean(), 1e-9))
    postings: Dict[str, Tuple[np.ndarray, np.ndarray]] = {}
    gathered: Dict[str, Tuple[List[int], List[int]]] = defaultdict(lambda: ([], []))
    for j, tokens in enumerate(tokenised):
        for term, count in Counter(tokens).items():
            gathered[term][0].append(j)
            gathered[term][1].append(count)
    n = len(documents)
    for term, (ids, counts) in gathered.items():
        ids_array, tf = np.array(ids), np.array(counts, dtype=np.float64)
        idf = math.log(1 + (n - len(ids) + 0.5) / (len(ids) + 0.5))
        postings[term] = ids_array, idf * tf * (k1 + 1) / (tf + norm[ids_array])
    scores = np.zeros((len(queries), n))
    for i, query in enumerate(queries):
        for term in words(query):
            if term in postings:
                ids_array, weights = postings[term]
                scores[i, ids_array] += weights
    return scores


def ranks(scores: np.ndarray) -> np.ndarray:
    """The 1-based rank of document i for query i; ties count against it."""
    scores = np.asarray(scores, dtype=np.float64)
    return (scores >= np.diag(scores)[:, None]).sum(axis=1)  # document i itself counts 1


def standardised(scores: np.ndarray) -> np.ndarray:
    """Each query's scores less their mean, over their standard deviation."""
    scores = np.asarray(scores, dtype=np.float64)
    return (scores - scores.mean(axis=1, keepdims=True)) / (scores.std(axis=1, keepdims=True) + 1e-12)


def hybrid_scores(bm25: np.ndarray, cosines: np.ndarray) -> np.ndarray:
    """BM25 and the model with equal say: the sum of their standardised scores."""
    return standardised(bm25) + standardised(cosines)


def metrics(rank: np.ndarray) -> Dict[str, float]:
    return {"recall@1": float(np.mean(rank <= 1)), "recall@10": float(np.mean(rank <= 10)),
            "MRR": float(np.mean(1.0 / rank))}


# ---- the model ----------------------------------------------------------------------------

OBJECTIVES = {"contrastive": uform.Objective.CONTRASTIVE, "joint": uform.Objective.JOINT}


def make_trainer(*, depth: int, hidden: int, context: int, pairs: int, steps: int, learning_rate: float,
                 warmup: int, objective: str = "contrastive", inverse_temperature: float = 20.0,
                 seed: int = 0, threads: int = 2) -> uform.Trainer:
    return uform.Trainer.init_ram(
        uform.Executor.for_ram(threads), depth=depth, hidden=hidden, objective=OBJECTIVES[objective],
        contrastive=uform.Contrastive(pair_loss=uform.PairLossForm.BALANCED, inverse_temperature=inverse_temperature),
        # Every document fills at most a row, queries share rows: 2 rows a pair never run out.
        batch=uform.BatchShape(max_rows_per_device=2 * pairs, max_columns_per_row=context),
        schedule=uform.Schedule(learning_rate=learning_rate, warmup_steps=warmup, steps=steps), seed=seed)


def batches(train: Sequence[Pair], pairs: int, seed: int) -> Iterator[Tuple[List[bytes], List[int]]]:
    """Endless batches of `pairs` training pairs, shuffled each pass: texts [query 0, document 0,
    query 1, ...] and bags [0, 0, 1, 1, ...], so the other documents are the negatives."""
    rng = np.random.default_rng([seed, 0xC0DE])
    bags = [i // 2 for i in range(2 * pairs)]
    order: List[int] = []
    while True:
        if len(order) < pairs:
            order += rng.permutation(len(train)).tolist()
        chosen, order = order[:pairs], order[pairs:]
        yield [text for i in chosen for text in (train[i].query.encode(), train[i].document)], bags


def embed(model: uform.Model, texts: Sequence[bytes]) -> np.ndarray:
    return np.array(model.text_encode(list(texts), uform.Arena()).embeddings)


def model_scores(path: str, test: Sequence[Pair]) -> np.ndarray:
    """Cosines of every held-out query against every held-out document, through the checkpoint."""
    model = uform.Model.load_ram(path)
    return embed(model, [p.query.encode() for p in test]) @ embed(model, [p.document for p in test]).T


def train_bar(step: int, steps: int, loss: float, rate: float, seconds: float) -> None:
    width = 30
    filled = width * step // steps
    print(f"\r  training [{'#' * filled}{'.' * (width - filled)}] step {step:>{len(str(steps))}}/{steps}"
          f"  loss {loss:6.3f}  lr {rate:.2e}  {seconds:5.1f} s", end="", flush=True)
    if step == steps:
        print()


def train(trainer: uform.Trainer, train_pairs: Sequence[Pair], *, pairs: int, steps: int, seed: int = 0,
          eval_at: Sequence[int] = (), evaluate=None, bar: bool = True) -> Tuple[List[float], Dict[int, dict]]:
    """Runs `steps` steps; at each step of eval_at, calls evaluate(step) and keeps its answer."""
    stats = uform.TrainerStepStats()
    losses: List[float] = []
    curve: Dict[int, dict] = {}
    started = time.perf_counter()
    stream = batches(train_pairs, pairs, seed)
    for step in range(1, steps + 1):
        texts, bags = next(stream)
        trainer.step([TEXT] * len(texts), texts, bags=bags, stats=stats)
        if stats.dropped:
            raise RuntimeError(f"step {step}: {stats.dropped} items dropped: raise max_rows_per_device")
        losses.append(stats.loss)
        if bar and (step % 10 == 0 or step == steps):
            train_bar(step, steps, float(np.mean(losses[-50:])), stats.learning_rate, time.perf_counter() - started)
        if step in eval_at and evaluate is not None:
            curve[step] = evaluate(step)
    return losses, curve


# ---- the demo -----------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def table(rows: Sequence[Tuple[str, Dict[str, float], str]]) -> str:
    lines = [f"  {'':<36} {'recall@1':>9} {'recall@10':>9} {'MRR':>7}   time",
             f"  {'-' * 36} {'-' * 9} {'-' * 9} {'-' * 7}   {'-' * 20}"]
    for name, m, seconds in rows:
        lines.append(f"  {name:<36} {m['recall@1']:9.3f} {m['recall@10']:9.3f} {m['MRR']:7.3f}   {seconds}")
    return "\n".join(lines)


def parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps")
    parser.add_argument("--depth", type=int, default=1, help="transformer blocks")
    parser.add_argument("--hidden", type=int, default=64, help="width (and embedding dimensions)")
    parser.add_argument("--context", type=int, default=256, help="bytes of a document (the model's context)")
    parser.add_argument("--pairs", type=int, default=32, help="(query, document) pairs a step")
    parser.add_argument("--learning-rate", type=float, default=5e-4, help="peak learning rate")
    parser.add_argument("--warmup", type=int, default=100, help="warmup steps")
    parser.add_argument("--objective", choices=sorted(OBJECTIVES), default="contrastive")
    parser.add_argument("--held-out", type=float, default=0.2, help="share of the pairs held out, by whole top-level modules")
    parser.add_argument("--seed", type=int, default=0, help="weights, batches")
    parser.add_argument("--threads", type=int, default=2, help="threads of the executor")
    parser.add_argument("--eval-at", default="", help="comma-separated steps at which to also measure held-out "
                                                      "recall (a curve of this one run)")
    parser.add_argument("--out", default=os.path.join(ROOT, "c", "build", "code-search.safetensors"),
                        help="where the trained checkpoint goes (the step-0 save sits next to it)")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse(argv)
    started = time.perf_counter()
    stdlib = stdlib_directory()
    if stdlib is None:
        print("code search: this Python has no standard library sources (.py files) to learn from; skipped")
        return
    pairs = collect(stdlib, args.context)
    train_pairs, test = split(pairs, args.held_out)
    tops_train = sorted({p.top for p in train_pairs})
    tops_test = sorted({p.top for p in test})
    parsed = time.perf_counter() - started
    print(f"task: Python {sys.version.split()[0]} standard library at {stdlib}: {len(pairs)} documented "
          f"functions ({parsed:.1f} s to parse); {len(train_pairs)} training pairs from {len(tops_train)} "
          f"top-level modules, {len(test)} held-out pairs from {len(tops_test)} others:")
    print("  " + "\n  ".join(textwrap.wrap(", ".join(tops_test), 96)))
    example = next((p for p in test if 120 < len(p.source) < 200), test[0])
    print(f"for example, {example.name}:\n  query    {example.query!r}\n  document "
          + "\n           ".join(example.source.splitlines()))
    cut = sum(len(p.source.encode()) > args.context for p in test)
    print(f"documents are cut to {args.context} bytes ({cut} of the {len(test)} held-out ones are longer)")

    # BM25 on the very documents the model reads, and on the whole functions for reference.
    clock = time.perf_counter()
    bm25_matrix = bm25_scores([p.query for p in test], [p.document.decode("utf-8", "ignore") for p in test])
    bm25 = metrics(ranks(bm25_matrix))
    bm25_seconds = time.perf_counter() - clock
    bm25_full = metrics(ranks(bm25_scores([p.query for p in test], [p.source for p in test])))

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    start_path = os.path.splitext(args.out)[0] + "-step0.safetensors"
    warmup = min(args.warmup, max(1, args.steps // 10))
    print(f"\nmodel: depth {args.depth}, hidden {args.hidden}, context {args.context} bytes; "
          f"{args.objective.upper()} (BALANCED, inverse temperature 20), {args.pairs} pairs a step "
          f"(a query against its document and the step's {2 * args.pairs - 2} other texts), "
          f"{args.steps} steps, learning rate {args.learning_rate:g} (warmup {warmup}, cosine to "
          f"{args.learning_rate / 10:g}), {args.threads} threads")
    trainer = make_trainer(depth=args.depth, hidden=args.hidden, context=args.context, pairs=args.pairs,
                           steps=args.steps, learning_rate=args.learning_rate, warmup=warmup,
                           objective=args.objective, seed=args.seed, threads=args.threads)
    trainer.save(start_path)
    untrained = metrics(ranks(model_scores(start_path, test)))

    eval_at = sorted({int(s) for s in args.eval_at.split(",") if s.strip()} - {args.steps})
    checkpoint = os.path.splitext(args.out)[0] + "-eval.safetensors"

    def evaluate(step: int) -> dict:
        trainer.save(checkpoint)
        m = metrics(ranks(model_scores(checkpoint, test)))
        print(f"\n    step {step}: held-out recall@1 {m['recall@1']:.3f}, recall@10 {m['recall@10']:.3f}, "
              f"MRR {m['MRR']:.3f}")
        return m

    clock = time.perf_counter()
    losses, curve = train(trainer, train_pairs, pairs=args.pairs, steps=args.steps, seed=args.seed,
                          eval_at=eval_at, evaluate=evaluate)
    train_seconds = time.perf_counter() - clock
    if os.path.exists(checkpoint):
        os.remove(checkpoint)
    print(f"  {args.steps} steps in {train_seconds:.1f} s; loss {np.mean(losses[:50]):.2f} -> "
          f"{np.mean(losses[-50:]):.2f}")
    trainer.save(args.out)

    model = uform.Model.load_ram(args.out)
    d = model.describe()
    print(f"\nsaved {os.path.relpath(args.out)} and loaded it back: {d.dimensions} dimensions, context "
          f"{d.context}, {d.quantization.name} weights, {d.cpu_class.name} kernels")
    clock = time.perf_counter()
    queries = embed(model, [p.query.encode() for p in test])
    documents = embed(model, [p.document for p in test])
    encode_seconds = time.perf_counter() - clock
    scores = queries @ documents.T
    trained = metrics(ranks(scores))
    hybrid = metrics(ranks(hybrid_scores(bm25_matrix, scores)))
    curve[0], curve[args.steps] = untrained, trained

    print(f"\nthe first held-out queries of {len(tops_test)} unseen modules, each searched over all "
          f"{len(test)} held-out documents:")
    rank = ranks(scores)
    for i in list(range(0, len(test), max(1, len(test) // 6)))[:6]:
        j = int(np.argmax(scores[i]))
        print(f"  {'ok   ' if i == j else f'#{rank[i]:<4}'} {test[i].query[:80]!r}\n        -> {test[j].name}"
              + ("" if i == j else f" (wanted {test[i].name})"))

    total = time.perf_counter() - started
    print(f"\nheld-out retrieval, {len(test)} queries against {len(test)} documents "
          f"(chance: recall@1 {1 / len(test):.4f}, recall@10 {min(1, 10 / len(test)):.4f}):")
    print(table([
        ("BM25 (same cut documents)", bm25, f"{bm25_seconds:.1f} s"),
        ("BM25 (whole functions)", bm25_full, ""),
        ("uform, untrained (step 0)", untrained, ""),
        (f"uform, {args.steps} steps", trained,
         f"{train_seconds:.0f} s training, {encode_seconds:.1f} s encoding"),
        ("BM25 + uform (standardised, summed)", hybrid, ""),
    ]))
    if len(curve) > 1:
        print("\nthe curve of this run (held-out, the same documents):")
        for step in sorted(curve):
            m = curve[step]
            print(f"  step {step:>6}: recall@1 {m['recall@1']:.3f}  recall@10 {m['recall@10']:.3f}  "
                  f"MRR {m['MRR']:.3f}")
    winner = "uform" if trained["MRR"] > bm25["MRR"] else "BM25"
    print(f"\nby MRR, {winner} wins this run; the two together "
          + ("beat BM25 alone" if hybrid["MRR"] > bm25["MRR"] else "do not beat BM25 alone") + "."
          + f" {total:.0f} s in all on {os.cpu_count()} x {cpu_model()} "
          f"({d.cpu_class.name} kernels; load average {os.getloadavg()[0]:.1f} at the end).")


if __name__ == "__main__":
    main()
