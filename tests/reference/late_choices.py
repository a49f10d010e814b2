"""PyTorch reference of late interaction and calibrated choices (docs/training.md sections 9
and 10), and of the whole step loss once they join the objectives of sections 2-4.

Float64, one item at a time, loops over anchors, written for clarity rather than speed, like
`training.py` (whose RNG, masking, relations and per-anchor pair loss it reuses):

* section 5: `split_by_tokens` (the contiguous item ranges of the replicas, as the trainer
  splits them), `item_rows`;
* section 9: `late_interaction_plan` (which items are query anchors, with how many query
  tokens, and which are documents, under the sides and the per-device budgets),
  `late_interaction_pairs` (each query anchor's document positives and negatives),
  `maxsim`, `late_interaction_loss`;
* section 10: `choice_ids`, `choice_probabilities`, `choices_loss`;
* sections 2-4 with 9-10: `step_inputs` (each item's forward input: corrupted text, or a
  choice item's bytes plus MASK), `step_token_vectors`, `step_losses` (every term of one
  trainer step, weighted as the stats report them).

Choices this module makes where docs/training.md is silent or ambiguous are marked
"Resolved:"; the ones of sections 9 and 10 are also gathered here:

Resolved (9, forward input): token vectors come from the step's one forward pass, on the
  corrupted input whenever the objective masks text (MASKED and JOINT), not only under
  JOINT as section 9 literally says; under CONTRASTIVE the input is the text as given.
  Choice items are never corrupted.
Resolved (9, budgets): "query tokens" and "rows" count the item's packed rows (after
  truncation; a choice item's MASK row included). An item admitted as a query is also
  considered as a document (QUERY_AND_DOCUMENT), each side with its own budget, in the
  same walk. Items with no rows consume no budget and are not documents.
Resolved (9, anchors): a SIGMOID query anchor counts in the average even when it has no
  scored candidate (as section 3's "all anchors"); every query anchor is admitted by the
  budgets, so budget-skipped queries are not anchors.
Resolved (9, relations): relations are computed over the step's items by section 3's
  precedence first, then restricted to document candidates; a zero-weight positive that
  is a document still enters BALANCED's denominator.
Resolved (5, split): the replicas' item ranges are computed from each item's rows
  (`item_rows`), mirroring c/src/trainer.c `uform_split_by_tokens`, which counts a text's
  bytes cut at the row width; for a choice item shorter than a row this differs by its
  MASK row (the C side decides; the tests use items where both counts give one split).
Resolved (10, targets): targets are float32 values widened to float64 and used as given
  (not renormalised); an item with choices but no rows cannot happen (it has its MASK row).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence, Union

import numpy as np
import torch

from .model import BYTE_VALUES, MASK, ReferenceModel
from .training import (
    Edges,
    _f32,
    anchor_loss,
    contrastive_loss,
    mask_text,
    relations,
)

SIDES = ("NONE", "QUERY", "DOCUMENT", "QUERY_AND_DOCUMENT")     # uform.LateInteractionSide
Text = Union[bytes, str, Sequence[int]]


def _bytes(text: Text) -> bytes:
    return text.encode("utf-8") if isinstance(text, str) else bytes(text)


def _side(value) -> str:
    """A side as its name: accepts uform.LateInteractionSide, its int value or its name."""
    if isinstance(value, str):
        name = value.upper()
    elif hasattr(value, "name"):
        name = value.name
    else:
        code = int(value)
        if not 0 <= code < len(SIDES):
            raise ValueError(f"side {value!r}: expected 0..3")
        name = SIDES[code]
    if name not in SIDES:
        raise ValueError(f"side {value!r}: expected one of {SIDES}")
    return name


def late_pair_form(value) -> str:
    """Section 9: DERIVED is RANKED for late interaction (BALANCED for the contrastive term)."""
    name = str(getattr(value, "name", value)).upper()
    if name == "DERIVED":
        return "RANKED"
    if name not in ("BALANCED", "RANKED", "SIGMOID"):
        raise ValueError(f"pair_loss {value!r}: expected DERIVED, BALANCED, RANKED or SIGMOID")
    return name


# ----------------------------------------------------------------------------- 5. replicas

def item_rows(texts: Sequence[Text], columns: int, choices: Optional[Sequence[Text]] = None
              ) -> list[int]:
    """Rows each item occupies: its bytes cut at `columns`; an item with choices (section 10)
    its bytes cut at columns - 1 plus the MASK row."""
    out = []
    for index, text in enumerate(texts):
        n = len(_bytes(text))
        if choices is not None and len(_bytes(choices[index])):
            out.append(min(n, columns - 1) + 1)
        else:
            out.append(min(n, columns))
    return out


def split_by_tokens(lengths: Sequence[int], columns: int, replicas: int
                    ) -> list[tuple[int, int]]:
    """The replicas' contiguous item ranges [first, last), as c/src/trainer.c
    `uform_split_by_tokens` computes them (docs/training.md section 5: "contiguous ranges of
    about equal token counts").

    Each length counts as min(length, columns); with T the total, replica r takes items
    while the running count is below floor(T (r + 1) / replicas) (it may overshoot by the
    last item taken), and the last replica takes everything left.
    """
    if replicas < 1:
        raise ValueError("at least one replica")
    counted = [min(int(n), columns) for n in lengths]
    total = sum(counted)
    ranges = []
    item = seen = 0
    for r in range(replicas):
        first = item
        target = total * (r + 1) // replicas
        while item < len(counted) and (seen < target or r + 1 == replicas):
            seen += counted[item]
            item += 1
        ranges.append((first, item))
    return ranges


# ----------------------------------------------------------------------------- 9. late interaction

class LatePlan(NamedTuple):
    """Who takes part in the late-interaction term of one step."""
    queries: dict[int, int]      # query anchor -> |Q_i|, the number of its query tokens
    documents: list[int]         # document items, in the step's order


def late_interaction_plan(rows: Sequence[int], *, sides=None,
                          max_query_span: Optional[int] = None,
                          devices: Optional[Sequence[tuple[int, int]]] = None,
                          max_query_tokens_per_device: Optional[int] = None,
                          max_documents_per_device: Optional[int] = None,
                          max_document_tokens_per_device: Optional[int] = None) -> LatePlan:
    """Section 9, "Sides" and "Budgets".

    rows: each item's row count (0 for an empty or dropped item: it takes no part).
    sides: one side per item (None: every item QUERY_AND_DOCUMENT). A query item's query
    tokens are its first min(n_i, max_query_span) rows (max_query_span None: all rows).
    devices: contiguous [first, last) item ranges covering the items, one per replica
    (None: one device holding every item). None for a budget means it never binds.

    Each device walks its own items in order; an item is admitted as a query when its query
    tokens fit in what is left of the query-token budget, and as a document when fewer than
    max_documents_per_device documents are admitted and its rows fit in what is left of the
    document-token budget. An item that does not fit is skipped for that side (budget left
    unchanged), so later, smaller items may still fit.
    """
    n = len(rows)
    sides = ["QUERY_AND_DOCUMENT"] * n if sides is None else [_side(s) for s in sides]
    if len(sides) != n:
        raise ValueError(f"{len(sides)} sides for {n} items")
    if max_query_span is not None and max_query_span < 1:
        raise ValueError("max_query_span must be at least 1 (None: every row)")
    devices = [(0, n)] if devices is None else [(int(a), int(b)) for a, b in devices]
    covered = [i for first, last in devices for i in range(first, last)]
    if covered != list(range(n)):
        raise ValueError(f"devices {devices} must cover items 0..{n - 1} in order, once")
    unbounded = math.inf
    queries: dict[int, int] = {}
    documents: list[int] = []
    for first, last in devices:
        query_left = (unbounded if max_query_tokens_per_device is None
                      else max_query_tokens_per_device)
        document_left = (unbounded if max_document_tokens_per_device is None
                         else max_document_tokens_per_device)
        document_limit = unbounded if max_documents_per_device is None else max_documents_per_device
        admitted_documents = 0
        for i in range(first, last):
            n_i = int(rows[i])
            if n_i == 0:
                continue
            if sides[i] in ("QUERY", "QUERY_AND_DOCUMENT"):
                span = n_i if max_query_span is None else min(n_i, max_query_span)
                if span <= query_left:
                    queries[i] = span
                    query_left -= span
            if sides[i] in ("DOCUMENT", "QUERY_AND_DOCUMENT"):
                if admitted_documents < document_limit and n_i <= document_left:
                    documents.append(i)
                    admitted_documents += 1
                    document_left -= n_i
    return LatePlan(queries, documents)


def late_interaction_pairs(plan: LatePlan, n: int, *, bags=None, attract: Optional[Edges] = None,
                           repel: Optional[Edges] = None, ignore: Optional[Edges] = None,
                           negatives: str = "AMBIENT", ambient_repulsion_weight: float = 1.0
                           ) -> dict[int, tuple[dict[int, float], dict[int, float]]]:
    """Per query anchor i (in item order): (positives {j: a_ij}, negatives {j: r_ij}) over the
    document candidates j != i, by section 3's precedence (`training.relations`)."""
    table = relations(n, bags=bags, attract=attract, repel=repel, ignore=ignore,
                      negatives=negatives, ambient_repulsion_weight=ambient_repulsion_weight)
    documents = set(plan.documents)
    out = {}
    for i in sorted(plan.queries):
        positives, negative = table[i]
        out[i] = ({j: w for j, w in positives.items() if j in documents and j != i},
                  {j: w for j, w in negative.items() if j in documents and j != i})
    return out


def maxsim(queries: torch.Tensor, document: torch.Tensor) -> torch.Tensor:
    """m = (1 / |Q|) sum_t max_u (q_t . d_u) for query tokens [a, W] and document rows [b, W].

    The max's gradient goes to the first document row reaching it (torch.argmax returns the
    first maximal index), as section 9 says for ties."""
    if queries.shape[0] == 0 or document.shape[0] == 0:
        raise ValueError("MaxSim needs at least one query token and one document row")
    products = queries @ document.T                                   # [a, b]
    best = torch.argmax(products, dim=1)                              # first maximal row
    return products.gather(1, best[:, None])[:, 0].mean()


def late_interaction_loss(token_vectors: Sequence[Optional[torch.Tensor]], *, sides=None,
                          max_query_span: Optional[int] = None,
                          log_inverse_temperature: torch.Tensor, bias: torch.Tensor,
                          bags=None, attract: Optional[Edges] = None,
                          repel: Optional[Edges] = None, ignore: Optional[Edges] = None,
                          negatives: str = "AMBIENT", ambient_repulsion_weight: float = 1.0,
                          pair_loss: str = "RANKED",
                          devices: Optional[Sequence[tuple[int, int]]] = None,
                          max_query_tokens_per_device: Optional[int] = None,
                          max_documents_per_device: Optional[int] = None,
                          max_document_tokens_per_device: Optional[int] = None
                          ) -> torch.Tensor:
    """The late-interaction term of docs/training.md section 9, unweighted (the caller
    multiplies by LateInteraction.weight).

    token_vectors: per item of the step, its token vectors [n_i, W] (None or zero rows: the
    item takes no part); log_inverse_temperature and bias: [1] tensors (tau, b).
    For query anchor i and document j != i: s_ij = maxsim(Q_i, D_j) exp(tau) + (SIGMOID ? b
    : 0), Q_i the first |Q_i| rows of item i (`late_interaction_plan`). Pair forms as in
    section 3 (`training.anchor_loss`); DERIVED is RANKED. BALANCED and RANKED average over
    the query anchors whose positives' weights sum to more than 0, SIGMOID over every query
    anchor; 0 (a constant) without such anchors. No temperature groups, no Matryoshka widths.
    """
    form = late_pair_form(pair_loss)
    n = len(token_vectors)
    if log_inverse_temperature.numel() != 1 or bias.numel() != 1:
        raise ValueError("late interaction has one temperature and one bias ([1] tensors)")
    rows = [0 if v is None else int(v.shape[0]) for v in token_vectors]
    plan = late_interaction_plan(rows, sides=sides, max_query_span=max_query_span,
                                 devices=devices,
                                 max_query_tokens_per_device=max_query_tokens_per_device,
                                 max_documents_per_device=max_documents_per_device,
                                 max_document_tokens_per_device=max_document_tokens_per_device)
    pairs = late_interaction_pairs(plan, n, bags=bags, attract=attract, repel=repel,
                                   ignore=ignore, negatives=negatives,
                                   ambient_repulsion_weight=ambient_repulsion_weight)
    scale = torch.exp(log_inverse_temperature.reshape(()))
    shift = bias.reshape(()) if form == "SIGMOID" else None
    total: Optional[torch.Tensor] = None
    anchors = 0
    for i, (positives, negative) in pairs.items():
        query = token_vectors[i][:plan.queries[i]]
        scored = sorted(set(positives) | set(negative))
        # The anchor's score row, indexable by candidate id: only scored ids are ever read.
        row = [query.new_zeros(()) for _ in range(n)]
        for j in scored:
            s = maxsim(query, token_vectors[j]) * scale
            row[j] = s + shift if shift is not None else s
        loss_i = anchor_loss(form, torch.stack(row), positives, negative)
        if loss_i is None:
            continue
        total = loss_i if total is None else total + loss_i
        anchors += 1
    if total is None:
        dtype = next((v.dtype for v in token_vectors if v is not None), torch.float64)
        return torch.zeros((), dtype=dtype)
    return total / anchors


# ----------------------------------------------------------------------------- 10. choices

def choice_ids(text: Text, context: int) -> list[int]:
    """A choice item's rows (section 10, as text_choose): its bytes cut to context - 1, then
    MASK (256) at the next position."""
    if context < 1:
        raise ValueError("context must be at least 1")
    return list(_bytes(text)[:context - 1]) + [MASK]


def _choice_bytes(choices: Text) -> list[int]:
    values = list(_bytes(choices))
    if len(set(values)) != len(values):
        raise ValueError(f"choices {bytes(values)!r} must be distinct bytes")
    return values


def _log_temperature(model: ReferenceModel, group: int) -> torch.Tensor:
    """choices.log_temperature[g], or 0 (temperature 1) when the checkpoint has none."""
    if not model.has("choices.log_temperature"):
        if group != 0:
            raise ValueError(f"group {group}: the checkpoint has no choices.log_temperature")
        return torch.zeros((), dtype=model.dtype)
    table = model.weight("choices.log_temperature")
    if not 0 <= group < table.shape[0]:
        raise ValueError(f"group {group} outside [0, {table.shape[0]})")
    return table[group]


def choice_log_probabilities(model: ReferenceModel, h_mask: torch.Tensor, choices: Text,
                             group: int = 0) -> torch.Tensor:
    """log p_c for the state h_MASK [H] of an item's MASK row (section 10):
    z_c = (h . text.bytes[c] + heads.bytes.bias[c]) / exp(choices.log_temperature[g]),
    log p = log_softmax(z) over the choices in the order given."""
    values = _choice_bytes(choices)
    if not values:
        raise ValueError("no choices")
    if not model.has("heads.bytes.bias"):
        raise ValueError("the checkpoint has no byte head (heads.bytes.bias)")
    index = torch.tensor(values, dtype=torch.long)
    table = model.weight("text.bytes")[:BYTE_VALUES][index]             # [C, H]
    logits = table @ h_mask + model.weight("heads.bytes.bias")[index]   # [C]
    z = logits / torch.exp(_log_temperature(model, int(group)))
    return torch.log_softmax(z, dim=0)


def choice_probabilities(model: ReferenceModel, ids: Sequence[int], choices: Text,
                         group: int = 0) -> torch.Tensor:
    """p [C] for an item whose rows are `ids` (last row MASK, as `choice_ids` gives them)."""
    ids = [int(v) for v in ids]
    if not ids or ids[-1] != MASK:
        raise ValueError("a choice item's last row must be MASK (256)")
    h = model.text_hidden(torch.tensor(ids, dtype=torch.long))
    return torch.exp(choice_log_probabilities(model, h[-1], choices, group))


def _targets(values, count: int) -> torch.Tensor:
    y = [_f32(v) for v in np.asarray(values, dtype=np.float64).reshape(-1)]
    if len(y) != count:
        raise ValueError(f"{len(y)} targets for {count} choices")
    if not all(math.isfinite(v) and v >= 0.0 for v in y):
        raise ValueError("choice targets must be finite and non-negative")
    return torch.tensor(y, dtype=torch.float64)


def choices_loss(model: ReferenceModel, items: Sequence[Text], choices: Sequence[Text],
                 targets: Sequence, groups: Optional[Sequence[int]] = None) -> torch.Tensor:
    """The choices term of section 10, unweighted: the mean over items with choices of
    loss_i = -sum_c y_c log p_c (y as given, float32 values); 0 (a constant) without any.

    items: each item's text; choices: one string of distinct bytes per item (empty: none);
    targets: one sequence of floats per item (ignored for an item without choices);
    groups: each item's temperature group (None: all 0)."""
    if len(choices) != len(items) or len(targets) != len(items):
        raise ValueError("one choices string and one targets entry per item")
    groups = [0] * len(items) if groups is None else [int(g) for g in groups]
    losses = []
    for index, text in enumerate(items):
        values = _choice_bytes(choices[index])
        if not values:
            continue
        y = _targets(targets[index], len(values))
        ids = choice_ids(text, model.context)
        h = model.text_hidden(torch.tensor(ids, dtype=torch.long))
        log_p = choice_log_probabilities(model, h[-1], bytes(values), groups[index])
        losses.append(-(y.to(log_p.dtype) * log_p).sum())
    if not losses:
        return torch.zeros((), dtype=model.dtype)
    return torch.stack(losses).mean()


# ----------------------------------------------------------------------------- the whole step

class StepItem(NamedTuple):
    """One item of a step as the trainer sees it."""
    original: list[int]      # the bytes after the cut (a choice item: without its MASK)
    ids: list[int]           # the forward input: corrupted bytes, or a choice item's rows
    selected: list[bool]     # where the masked-text loss is taken (never in a choice item)
    choices: bytes           # the item's choices (empty: none)


def step_inputs(texts: Sequence[Text], *, context: int, seed: int, step: int, corrupt: bool,
                choices: Optional[Sequence[Text]] = None, **masking: float) -> list[StepItem]:
    """Each item's forward input (sections 2 and 10). The item index of the RNG is the
    item's position in the step's list, choice items included (they draw nothing).

    A text item is cut at `context` and, when `corrupt` (MASKED, JOINT), masked by
    `training.mask_text`; an item with choices is its bytes cut to context - 1 plus MASK,
    never corrupted, with no selected position."""
    out = []
    for index, text in enumerate(texts):
        data = _bytes(text)
        chosen = _bytes(choices[index]) if choices is not None else b""
        if chosen:
            ids = choice_ids(data, context)
            out.append(StepItem(list(data[:context - 1]), ids, [False] * len(ids), chosen))
            continue
        original = list(data[:context])
        if corrupt:
            ids, selected = mask_text(original, seed=seed, step=step, item=index, **masking)
        else:
            ids, selected = list(original), [False] * len(original)
        out.append(StepItem(original, ids, selected, b""))
    return out


def _hidden(model: ReferenceModel, items: Sequence[StepItem]) -> list[torch.Tensor]:
    return [model.text_hidden(torch.tensor(item.ids, dtype=torch.long)) for item in items]


def step_token_vectors(model: ReferenceModel, texts: Sequence[Text], *, seed: int, step: int,
                       corrupt: bool, choices: Optional[Sequence[Text]] = None,
                       **masking: float) -> list[torch.Tensor]:
    """Each item's token vectors [n_i, W] = normalize(W_tokens h_t) on the trainer's forward
    input (`step_inputs`): corrupted text when `corrupt`, a choice item's rows with MASK."""
    items = step_inputs(texts, context=model.context, seed=seed, step=step, corrupt=corrupt,
                        choices=choices, **masking)
    return [model.token_vectors(h) for h in _hidden(model, items)]


def step_losses(model: ReferenceModel, texts: Sequence[Text], *, seed: int, step: int,
                objective: str, masking: Optional[dict] = None, text_weight: float = 1.0,
                bags=None, groups: Optional[Sequence[int]] = None,
                attract: Optional[Edges] = None, repel: Optional[Edges] = None,
                ignore: Optional[Edges] = None, negatives: str = "AMBIENT",
                ambient_repulsion_weight: float = 1.0, contrastive_pair_loss: str = "BALANCED",
                widths: Optional[Sequence[int]] = None,
                late: Optional[dict] = None, sides=None,
                devices: Optional[Sequence[tuple[int, int]]] = None,
                choices: Optional[Sequence[Text]] = None, choice_targets=None,
                choices_weight: Optional[float] = None) -> dict[str, torch.Tensor]:
    """Every term of one trainer step (docs/training.md section 4 with 9 and 10), as the
    stats report them: {"loss" (weighted total), "masked_text", "contrastive",
    "late_interaction" (weighted), "choices" (unweighted)}; each a float64 tensor whose
    graph reaches the model's parameters.

    objective: "MASKED", "CONTRASTIVE" or "JOINT". masking: `mask_text` keywords (derived
    values when None). The relations (bags, edges, negatives, ambient weight) serve both the
    contrastive and the late-interaction terms; `groups` is each item's temperature group,
    for the contrastive anchor and for the item's choices.
    late: None (not configured) or keywords of `late_interaction_loss` (pair_loss,
    max_query_span, the three budgets) plus "weight"; the temperature and bias are the
    model's late_interaction.* parameters. choices/choice_targets: per item (see
    `choices_loss`); choices_weight None means choices are not configured.

    Under MASKED and JOINT the forward input is corrupted, so the contrastive embeddings and
    the token vectors see it (Resolved, see the module docstring); choice items are never
    corrupted and contribute no masked position, but keep their item index in the RNG.
    """
    objective = str(getattr(objective, "name", objective)).upper()
    if objective not in ("MASKED", "CONTRASTIVE", "JOINT"):
        raise ValueError(f"objective {objective!r}")
    masking = dict(masking or {})
    items = step_inputs(texts, context=model.context, seed=seed, step=step,
                        corrupt=objective != "CONTRASTIVE", choices=choices, **masking)
    hidden = _hidden(model, items)
    zero = torch.zeros((), dtype=model.dtype)
    terms = {"masked_text": zero, "contrastive": zero, "late_interaction": zero,
             "choices": zero}
    total = zero

    if objective != "CONTRASTIVE":
        table = model.weight("text.bytes")[:BYTE_VALUES]
        bias = model.weight("heads.bytes.bias")
        losses = []
        for item, h in zip(items, hidden):
            rows = [t for t, chosen in enumerate(item.selected) if chosen]
            if not rows:
                continue
            logits = h[rows] @ table.T + bias
            target = torch.tensor([item.original[t] for t in rows], dtype=torch.long)
            losses.append(torch.logsumexp(logits, dim=-1) - logits.gather(1, target[:, None])[:, 0])
        if losses:
            terms["masked_text"] = torch.cat(losses).mean()
        total = total + _f32(text_weight) * terms["masked_text"]

    if objective != "MASKED":
        e = torch.stack([model.pool(h) for h in hidden]) if hidden else \
            torch.zeros(0, model.dimensions, dtype=model.dtype)
        terms["contrastive"] = contrastive_loss(
            e, log_inverse_temperature=model.weight("contrastive.log_inverse_temperature"),
            bias=model.weight("contrastive.bias"), groups=groups, bags=bags, attract=attract,
            repel=repel, ignore=ignore, negatives=negatives,
            ambient_repulsion_weight=ambient_repulsion_weight, pair_loss=contrastive_pair_loss,
            widths=widths)
        total = total + terms["contrastive"]

    if late is not None:
        late = dict(late)
        weight = _f32(late.pop("weight", 1.0))
        vectors = [model.token_vectors(h) for h in hidden]
        term = late_interaction_loss(
            vectors, sides=sides, devices=devices,
            log_inverse_temperature=model.weight("late_interaction.log_inverse_temperature"),
            bias=model.weight("late_interaction.bias"), bags=bags, attract=attract,
            repel=repel, ignore=ignore, negatives=negatives,
            ambient_repulsion_weight=ambient_repulsion_weight, **late)
        terms["late_interaction"] = weight * term
        total = total + terms["late_interaction"]

    if choices_weight is not None:
        group_of = [0] * len(items) if groups is None else [int(g) for g in groups]
        losses = []
        for index, (item, h) in enumerate(zip(items, hidden)):
            if not item.choices:
                continue
            y = _targets(choice_targets[index], len(item.choices))
            log_p = choice_log_probabilities(model, h[-1], item.choices, group_of[index])
            losses.append(-(y * log_p).sum())
        if losses:
            terms["choices"] = torch.stack(losses).mean()
        total = total + _f32(choices_weight) * terms["choices"]

    terms["loss"] = total
    return terms
