"""The rules' weights on torch tensors, and the loss they make.

:func:`aggregation_weights` checks a batch, builds :class:`TorchGroups` (the :class:`balagg.aggregation.rules.Groups`
a rule's formula is written against) and evaluates the rule's formula in float64; :func:`aggregate` is the
weighted token sum every rule reduces with. :func:`group_advantages` and :func:`length_diagnostics` are the
GRPO advantages and the length statistics behind the paper's diagnosis. All functions are vectorised over
the batch; group ids may come in any order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from balagg.aggregation.rules import ALPHA, RULES, aggregator, check_scope, weight_formula

__all__ = [
    "TorchGroups",
    "aggregation_weights",
    "aggregate",
    "microbatch_token_weights",
    "group_advantages",
    "length_diagnostics",
]

# --------------------------------------------------------------------------------------------------
# Input handling and segment sums (the only "group" machinery; everything else is elementwise)
# --------------------------------------------------------------------------------------------------


def _as_1d(name: str, values: Any) -> torch.Tensor:
    tensor = values if isinstance(values, torch.Tensor) else torch.as_tensor(values)
    if tensor.dim() != 1:
        raise ValueError(f"{name} must be one-dimensional (one value per response), got shape {tuple(tensor.shape)}")
    return tensor


def _group_index(group_ids: Any, size: int) -> tuple[torch.Tensor, int]:
    """Dense group index in [0, n_groups) for each response, and n_groups."""
    if isinstance(group_ids, torch.Tensor):
        ids = group_ids
    else:
        try:
            ids = torch.as_tensor(group_ids)
        except (TypeError, ValueError, RuntimeError):  # strings or other hashables
            lookup: dict[Any, int] = {}
            ids = torch.tensor([lookup.setdefault(g, len(lookup)) for g in group_ids], dtype=torch.long)
    if ids.dim() != 1:
        raise ValueError(f"group_ids must be one-dimensional, got shape {tuple(ids.shape)}")
    if ids.numel() != size:
        raise ValueError(f"group_ids has {ids.numel()} entries but there are {size} responses")
    if size == 0:
        return torch.zeros(0, dtype=torch.long), 0
    _, inverse = torch.unique(ids, return_inverse=True)
    return inverse, int(inverse.max()) + 1


def _validated(
    lengths: Any, advantages: Any, group_ids: Any, scope: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, torch.dtype]:
    """Check inputs; return float64 lengths and advantages, the dense group index, n_groups and the
    dtype the weights are returned in."""
    check_scope(scope)
    lengths_t = _as_1d("lengths", lengths)
    advantages_t = _as_1d("advantages", advantages)
    if lengths_t.numel() != advantages_t.numel():
        raise ValueError(
            f"lengths and advantages must have one entry per response: got {lengths_t.numel()} lengths "
            f"and {advantages_t.numel()} advantages"
        )
    out_dtype = advantages_t.dtype if advantages_t.is_floating_point() else torch.float32
    lengths64 = lengths_t.detach().to(torch.float64)
    advantages64 = advantages_t.detach().to(torch.float64)
    if not torch.isfinite(lengths64).all():
        raise ValueError("lengths must be finite")
    if (lengths64 < 0).any():
        bad = torch.nonzero(lengths64 < 0).flatten()[:5].tolist()
        raise ValueError(f"lengths must be non-negative; negative at positions {bad}")
    if not torch.isfinite(advantages64).all():
        bad = torch.nonzero(~torch.isfinite(advantages64)).flatten()[:5].tolist()
        raise ValueError(f"advantages must be finite; non-finite at positions {bad}")
    size = lengths64.numel()
    if scope == "batch":
        # The whole batch is one group; the ids are still checked for shape.
        _group_index(group_ids, size)
        return lengths64, advantages64, torch.zeros(size, dtype=torch.long), int(size > 0), out_dtype
    index, n_groups = _group_index(group_ids, size)
    return lengths64, advantages64, index, n_groups, out_dtype


def _group_sum(values: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Per-group sums of ``values`` (one entry per group)."""
    return torch.zeros(n_groups, dtype=values.dtype).index_add_(0, index, values)


def _safe_div(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator, 0 where the denominator is 0 (an empty side or zero-length response
    carries no tokens, so its weight is irrelevant to the loss; 0 keeps everything finite)."""
    zero = denominator == 0
    return torch.where(zero, torch.zeros_like(numerator), numerator / torch.where(zero, 1.0, denominator))


@dataclass(frozen=True)
class TorchGroups:
    """:class:`balagg.aggregation.rules.Groups` over torch tensors: a checked batch (float64, one entry per
    response) and the dense group of each response."""

    lengths: torch.Tensor
    advantages: torch.Tensor
    index: torch.Tensor
    """the dense group of each response, in [0, count)"""
    count: int
    max_length: float | None = None
    alpha: float = ALPHA.default
    """delta-l-norm's exponent"""
    padded_width: float | None = None
    """the width the batch is padded to (None: its longest response)"""

    @cached_property
    def size(self) -> torch.Tensor:
        """G of each response's group."""
        return self.sum(torch.ones_like(self.lengths))

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Each response's group sum of ``values``."""
        return _group_sum(values, self.index, self.count)[self.index]

    def divide(self, numerator: torch.Tensor | float, denominator: torch.Tensor) -> torch.Tensor:
        """numerator / denominator, 0 where the denominator is 0 (:func:`_safe_div`)."""
        if not isinstance(numerator, torch.Tensor):
            numerator = torch.full_like(denominator, numerator)
        return _safe_div(numerator, denominator)

    def where(self, mask: torch.Tensor, chosen: torch.Tensor | float, otherwise: torch.Tensor | float) -> torch.Tensor:
        """``chosen`` where ``mask`` holds, ``otherwise`` elsewhere."""
        return torch.where(mask, chosen, otherwise)

    def constant(self, value: float) -> torch.Tensor:
        """``value`` for every response."""
        return torch.full_like(self.lengths, value)

    def longest(self) -> float:
        """The longest response's length."""
        return float(self.lengths.max())


def aggregation_weights(
    rule: str,
    lengths: Any,
    advantages: Any,
    group_ids: Any,
    *,
    scope: str | None = None,
    max_length: int | float | None = None,
    micro_batch_ids: Any = None,
    alpha: float | None = None,
    padded_width: int | float | None = None,
) -> torch.Tensor:
    """Per-response weights w_i >= 0 of ``rule``: its formula (:mod:`balagg.aggregation.rules`) on the batch.

    Args:
        rule: a name from :data:`~balagg.aggregation.rules.RULES` or :data:`~balagg.aggregation.rules.ALIASES`.
        lengths: [B] number of loss tokens of each response (>= 0).
        advantages: [B] finite advantages; only their signs (and, for ``balanced-agg-mass``, their
            magnitudes) matter.
        group_ids: [B] the group (prompt) of each response; any hashable values, any order.
        scope: ``group`` (the formula per group, every weight divided by the number of groups: the mean of
            per-group losses) or ``batch`` (the batch is one group); None (the default) is the rule's
            registered default scope (:data:`~balagg.aggregation.rules.DEFAULT_SCOPES`, an alias taking its
            rule's): ``batch`` for ``token-agg`` (DAPO's and verl's ``token-mean``), ``token-sum`` and
            ``delta-l-norm``, ``group`` for the rest.
        max_length: the constant length normaliser of ``dr-grpo`` and ``delta-l-norm`` (required there,
            ignored elsewhere).
        micro_batch_ids: [B] the micro-batch of each response (any hashable values), for
            ``token-agg-microbatch`` (default: one micro-batch, when the rule equals ``token-agg`` at scope
            ``batch``); ignored by the other rules.
        alpha: ``delta-l-norm``'s exponent (default :data:`balagg.aggregation.rules.ALPHA`); ignored elsewhere.
        padded_width: the width the batch is padded to, for ``seq-mean-token-sum-norm`` (default: the
            longest response); ignored elsewhere.

    Returns:
        [B] weights in the advantages' floating dtype (float32 for integer advantages), computed in
        float64. ``aggregate(per_token_loss, mask, weights)`` is then the rule's loss.
    """
    record = aggregator(rule)
    scope = record.default_scope if scope is None else scope
    if record.needs_max_length:
        if max_length is None:
            raise ValueError(f"rule {record.name!r} needs max_length (the constant length normaliser)")
        if not max_length > 0:
            raise ValueError(f"max_length must be positive, got {max_length}")
    lengths64, advantages64, index, n_groups, out_dtype = _validated(lengths, advantages, group_ids, scope)
    if lengths64.numel() == 0:
        return torch.zeros(0, dtype=out_dtype)
    if record.needs_micro_batches:
        return weight_formula(record.name)(_micro_batch_groups(lengths64, advantages64, micro_batch_ids)).to(out_dtype)
    if alpha is not None and not (isinstance(alpha, (int, float)) and alpha >= 0):
        raise ValueError(f"alpha must be a non-negative number, got {alpha!r}")
    if padded_width is not None and not padded_width > 0:
        raise ValueError(f"padded_width must be positive, got {padded_width}")
    groups = TorchGroups(lengths64, advantages64, index, n_groups,
                         max_length=float(max_length) if record.needs_max_length else None,
                         alpha=ALPHA.default if alpha is None else float(alpha),
                         padded_width=None if padded_width is None else float(padded_width))
    weights = weight_formula(record.name)(groups)
    return (weights / n_groups if record.per_group else weights).to(out_dtype)


def _micro_batch_groups(lengths64: torch.Tensor, advantages64: torch.Tensor, micro_batch_ids: Any) -> TorchGroups:
    """The batch grouped by micro-batch (None: all one micro-batch), for a micro-batch rule's formula."""
    if micro_batch_ids is None:
        micro_batch_ids = torch.zeros(lengths64.numel(), dtype=torch.long)
    index, n_micro = _group_index(micro_batch_ids, lengths64.numel())
    return TorchGroups(lengths64, advantages64, index, n_micro)


def microbatch_token_weights(lengths: Any, micro_batch_ids: Any = None) -> torch.Tensor:
    """verl's legacy FSDP token-mean as per-response weights: w_i = 1 / (T_m(i) * M), the formula of
    ``token-agg-microbatch`` over the micro-batches.

    ``lengths``: [B] loss tokens per response; ``micro_batch_ids``: [B] micro-batch of each response
    (None: all one micro-batch); T_m = tokens of micro-batch m, M = number of micro-batches. Summing
    ``aggregate(loss_m, mask_m, w_m)`` over the micro-batches equals verl's loop
    ``sum_m masked_mean(loss_m, mask_m) / M`` (and its gradient); a micro-batch without tokens gets
    weight 0. Returns float64."""
    lengths64 = _as_1d("lengths", lengths).detach().to(torch.float64)
    groups = _micro_batch_groups(lengths64, torch.zeros_like(lengths64), micro_batch_ids)  # it reads no advantages
    if lengths64.numel() == 0:
        return torch.zeros(0, dtype=torch.float64)
    return weight_formula("token-agg-microbatch")(groups)


def aggregate(per_token_loss: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The weighted token sum ``sum_i weights_i * sum_t mask_it * per_token_loss_it`` (a scalar).

    A plain sum, so summing it over any split of the batch into micro-batches (with each row keeping its
    weight) gives the whole batch's loss and gradients."""
    if per_token_loss.dim() != 2:
        raise ValueError(f"per_token_loss must be [batch, tokens], got shape {tuple(per_token_loss.shape)}")
    if mask.shape != per_token_loss.shape:
        raise ValueError(
            f"mask shape {tuple(mask.shape)} does not match per_token_loss shape {tuple(per_token_loss.shape)}"
        )
    if weights.dim() != 1 or weights.numel() != per_token_loss.shape[0]:
        raise ValueError(
            f"weights must be [batch] = [{per_token_loss.shape[0]}], got shape {tuple(weights.shape)}"
        )
    per_response = (per_token_loss * mask.to(per_token_loss.dtype)).sum(-1)
    return (per_response * weights.to(per_token_loss.dtype)).sum()


def group_advantages(
    rewards: Any, group_ids: Any, *, std: str = "population", eps: float = 1e-6
) -> torch.Tensor:
    """GRPO advantages A_i = (r_i - mean_g) / (std_g + eps), 0 in groups whose rewards are all equal.

    ``std`` is ``population`` (the paper's analysis: a binary group with k of G correct then has
    A = +sqrt((G-k)/k) and -sqrt(k/(G-k))), ``sample`` (Bessel-corrected, as TRL) or ``none`` (Dr.GRPO)."""
    if std not in ("population", "sample", "none"):
        raise ValueError(f"unknown std normalisation {std!r}; valid: population, sample, none")
    rewards_t = _as_1d("rewards", rewards)
    rewards64 = rewards_t.detach().to(torch.float64)
    if not torch.isfinite(rewards64).all():
        raise ValueError("rewards must be finite")
    index, n_groups = _group_index(group_ids, rewards64.numel())
    count = _group_sum(torch.ones_like(rewards64), index, n_groups)
    mean = _group_sum(rewards64, index, n_groups) / count
    centred = rewards64 - mean[index]
    squares = _group_sum(centred**2, index, n_groups)
    if std == "none":
        return centred.float()
    dof = count - 1 if std == "sample" else count
    scale = torch.sqrt(_safe_div(squares, dof))[index]
    return torch.where(scale > 0, centred / (scale + eps), torch.zeros_like(centred)).float()


def length_diagnostics(
    lengths: Any,
    advantages: Any,
    group_ids: Any,
    *,
    max_length: int | float | None = None,
    rules: Sequence[str] | None = None,
) -> dict[str, float]:
    """Length statistics behind the paper's diagnosis, for one batch of responses.

    Keys:
        ``len_mean``, ``len_std`` (population), ``len_cv`` = std / mean over the batch;
        ``len_cv_within_group``: mean over groups (with non-zero mean length) of the within-group CV;
        ``len_pos_mean`` / ``len_neg_mean``: mean length of responses with A > 0 / A < 0 in mixed groups
        (groups holding both signs); ``len_gap`` = ``len_neg_mean - len_pos_mean``;
        ``mixed_group_frac``: share of groups that are mixed;
        ``side_weight/<rule>/pos|neg``: sum over the side of w_i |o_i| |A_i|, the total weight times
        advantage that ``rule`` (at its default scope) gives each side. Sequence and
        balanced aggregation give both sides of a binary group the same sqrt(k(G-k))/G; token
        aggregation tilts it towards the side with the longer responses (sign-length coupling).
        ``side_mass_ratio/<rule>`` = neg / pos of those sums (NaN when pos is 0): 1 for the balanced rules.
        ``token_weight/<rule>/pos_long|pos_short``: the effective weight per token w_i |A_i| averaged
        over correct (A > 0) responses longer than / at most the median length of the batch's correct
        responses (NaN when a half is empty): seq-agg gives long correct responses less per token.
        ``dr-grpo`` and ``delta-l-norm`` are included only when ``max_length`` is given;
        ``token-agg-microbatch`` never (its weights belong to a micro-batch split, not to the batch).
    Undefined statistics (no mixed group, empty batch) are NaN.
    """
    lengths64, advantages64, index, n_groups, _ = _validated(lengths, advantages, group_ids, "group")
    nan = float("nan")
    if lengths64.numel() == 0:
        return {"len_mean": nan, "len_std": nan, "len_cv": nan, "len_cv_within_group": nan,
                "len_pos_mean": nan, "len_neg_mean": nan, "len_gap": nan, "mixed_group_frac": nan}

    def mean_of(values: torch.Tensor) -> float:
        return float(values.mean()) if values.numel() else nan

    len_mean = float(lengths64.mean())
    len_std = float(lengths64.std(unbiased=False))
    group_size = _group_sum(torch.ones_like(lengths64), index, n_groups)
    group_mean = _group_sum(lengths64, index, n_groups) / group_size
    group_var = _group_sum((lengths64 - group_mean[index]) ** 2, index, n_groups) / group_size
    has_length = group_mean > 0
    within_cv = torch.sqrt(group_var[has_length]) / group_mean[has_length]

    positive, negative = advantages64 > 0, advantages64 < 0
    mixed_group = (_group_sum(positive.double(), index, n_groups) > 0) & (
        _group_sum(negative.double(), index, n_groups) > 0
    )
    in_mixed = mixed_group[index]
    len_pos_mean = mean_of(lengths64[positive & in_mixed])
    len_neg_mean = mean_of(lengths64[negative & in_mixed])

    stats = {
        "len_mean": len_mean,
        "len_std": len_std,
        "len_cv": len_std / len_mean if len_mean > 0 else nan,
        "len_cv_within_group": mean_of(within_cv),
        "len_pos_mean": len_pos_mean,
        "len_neg_mean": len_neg_mean,
        "len_gap": len_neg_mean - len_pos_mean,
        "mixed_group_frac": float(mixed_group.double().mean()),
    }
    pos_lengths = lengths64[positive]
    pos_long = positive & (lengths64 > pos_lengths.median()) if pos_lengths.numel() else positive
    pos_short = positive & ~pos_long
    for record in (aggregator(rule) for rule in (rules if rules is not None else RULES)):
        if (record.needs_max_length and max_length is None) or record.needs_micro_batches:
            continue  # dr-grpo and delta-l-norm need max_length; token-agg-microbatch needs the micro-batches
        rule = record.name
        weights = aggregation_weights(
            rule, lengths64, advantages64, index, scope=record.default_scope, max_length=max_length
        ).double()
        carried = weights * lengths64 * advantages64.abs()
        stats[f"side_weight/{rule}/pos"] = float(carried[positive].sum())
        stats[f"side_weight/{rule}/neg"] = float(carried[negative].sum())
        pos_mass = stats[f"side_weight/{rule}/pos"]
        stats[f"side_mass_ratio/{rule}"] = stats[f"side_weight/{rule}/neg"] / pos_mass if pos_mass > 0 else nan
        per_token = weights * advantages64.abs()
        stats[f"token_weight/{rule}/pos_long"] = mean_of(per_token[pos_long])
        stats[f"token_weight/{rule}/pos_short"] = mean_of(per_token[pos_short])
    return stats
