"""The aggregation rules: closed forms, invariances, and agreement with a slow loop version."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from balagg.aggregation import aggregate, aggregation_weights, group_advantages, length_diagnostics
from balagg.aggregation.rules import (
    ALIASES,
    ALPHA,
    DEFAULT_SCOPES,
    MICRO_BATCH_RULES,
    NAME_PATTERN,
    RULES,
    Aggregator,
    aggregator,
    canonical_rule,
    default_scope,
    weight_formula,
)

# ------------------------------------------------------------------------------------------------
# A slow, obviously-correct reference: loop over groups and responses, formulas as in the paper.
# ------------------------------------------------------------------------------------------------


def reference_weights(rule, lengths, advantages, group_ids, scope="group", max_length=None, alpha=1.0):
    rule = canonical_rule(rule)
    n = len(lengths)
    if rule == "token-sum":
        return torch.ones(n, dtype=torch.float64)
    width = max(lengths, default=0)  # a batch padded to its longest response
    if rule == "token-agg-microbatch":  # no micro-batch ids: the whole call is one micro-batch
        total = sum(lengths)
        return torch.tensor([1.0 / total if total > 0 else 0.0] * n, dtype=torch.float64)
    if scope == "batch":
        group_ids = [0] * n
    groups: dict = {}
    for i, g in enumerate(group_ids):
        groups.setdefault(g, []).append(i)
    weights = [0.0] * n
    for members in groups.values():
        size = len(members)
        pos = [i for i in members if advantages[i] > 0]
        neg = [i for i in members if advantages[i] < 0]
        for i in members:
            if rule == "seq-agg":
                w = 1.0 / (size * lengths[i]) if lengths[i] > 0 else 0.0
            elif rule in ("token-agg", "prompt-mean"):
                total = sum(lengths[j] for j in members)
                w = 1.0 / total if total > 0 else 0.0
            elif rule in ("balanced-agg", "balanced-agg-mass"):
                side = pos if i in pos else neg if i in neg else None
                if side is None:
                    w = 0.0
                else:
                    mass = {j: (abs(advantages[j]) if rule == "balanced-agg-mass" else 1.0) for j in side}
                    share = sum(mass.values()) / size
                    tokens = sum(mass[j] * lengths[j] for j in side)
                    w = share / tokens if tokens > 0 else 0.0
            elif rule == "seq-mean-token-sum":
                w = 1.0 / size
            elif rule == "seq-mean-token-sum-norm":
                w = 1.0 / (size * width) if width > 0 else 0.0
            elif rule == "delta-l-norm":
                x = {j: lengths[j] ** -alpha if lengths[j] > 0 else 0.0 for j in members}
                w = x[i] / sum(x.values()) / max_length if sum(x.values()) > 0 else 0.0
            else:
                w = 1.0 / (size * max_length)
            weights[i] = w / len(groups)
    return torch.tensor(weights, dtype=torch.float64)


def reference_loss(rule, per_token_loss, mask, advantages, group_ids, scope="group", max_length=None):
    """The rule's loss written the way the paper writes it: per group, per side, token means."""
    lengths = mask.sum(-1)
    if scope == "batch":
        group_ids = [0] * len(lengths)
    rule = canonical_rule(rule)
    groups: dict = {}
    for i, g in enumerate(group_ids):
        groups.setdefault(g, []).append(i)
    sums = (per_token_loss * mask).sum(-1)
    total = 0.0
    for members in groups.values():
        size = len(members)
        if rule == "seq-agg":
            loss = sum(sums[i] / lengths[i] for i in members) / size
        elif rule == "token-agg":
            loss = sum(sums[i] for i in members) / sum(lengths[i] for i in members)
        elif rule == "balanced-agg":
            pos = [i for i in members if advantages[i] > 0]
            neg = [i for i in members if advantages[i] < 0]
            loss = 0.0
            for side in (pos, neg):
                if side:
                    token_mean = sum(sums[i] for i in side) / sum(lengths[i] for i in side)
                    loss = loss + len(side) / size * token_mean
        else:
            raise NotImplementedError(rule)
        total = total + loss
    return total / len(groups)


def binary_group(k, G, lengths):
    rewards = [1.0] * k + [0.0] * (G - k)
    advantages = group_advantages(rewards, [0] * G, eps=0.0)
    return torch.tensor(lengths, dtype=torch.float64), advantages.double()


def side_totals(rule, lengths, advantages, group_ids, **kw):
    w = aggregation_weights(rule, lengths, advantages, group_ids, **kw).double()
    carried = w * lengths * advantages.abs()
    return float(carried[advantages > 0].sum()), float(carried[advantages < 0].sum())


# ------------------------------------------------------------------------------------------------
# Names and bad input
# ------------------------------------------------------------------------------------------------


def test_rule_names_and_aliases():
    import re

    assert RULES == ("seq-agg", "token-agg", "token-agg-microbatch", "balanced-agg", "balanced-agg-mass",
                     "seq-mean-token-sum", "dr-grpo", "seq-mean-token-sum-norm", "token-sum", "prompt-mean",
                     "delta-l-norm")
    assert MICRO_BATCH_RULES == ("token-agg-microbatch",)
    assert canonical_rule("seq-mean-token-mean") == "seq-agg"
    assert canonical_rule("token-mean") == "token-agg"
    assert canonical_rule("bnpo") == "token-agg-microbatch"
    assert canonical_rule("seq-mean-token-sum-norm") == "seq-mean-token-sum-norm"
    assert set(ALIASES.values()) <= set(RULES)
    assert DEFAULT_SCOPES["prompt-mean"] == "group" and DEFAULT_SCOPES["delta-l-norm"] == "batch"
    assert DEFAULT_SCOPES["token-agg"] == "batch" and DEFAULT_SCOPES["balanced-agg"] == "group"


def test_rule_names_follow_the_one_pattern_the_workflow_matches():
    import re

    from balagg.layout import WILDCARDS, Cell

    assert all(re.fullmatch(NAME_PATTERN, rule) for rule in RULES)
    assert all(re.fullmatch(WILDCARDS["aggregator"], rule) for rule in RULES)  # the workflow's wildcard
    assert Cell.parse("m/d/token-agg-microbatch/seed0") == Cell("m", "d", "token-agg-microbatch", 0)
    for bad in ("sqrt2-agg", "Sqrt-agg", "sqrt_agg", "-sqrt", "sqrt--agg"):
        with pytest.raises(ValueError, match=re.escape(NAME_PATTERN)):
            Aggregator(bad, "a name no folder pattern matches", aggregator("seq-agg").formula)


def test_every_rule_has_a_formula_and_the_readme_table_lists_exactly_the_registry():
    import re
    from pathlib import Path

    for rule in RULES:
        record = aggregator(rule)
        if record.weights_of:  # it shares the formula of a rule that has its own
            assert record.formula is None and aggregator(record.weights_of).formula is not None
            assert weight_formula(rule) is aggregator(record.weights_of).formula
        else:
            assert callable(record.formula) and weight_formula(rule) is record.formula
    with pytest.raises(ValueError, match="give its formula or the rule whose formula it shares"):
        Aggregator("sqrt-agg", "a record without weights")
    with pytest.raises(ValueError, match="give its formula or the rule whose formula it shares"):
        Aggregator("sqrt-agg", "a record with both", aggregator("seq-agg").formula, weights_of="seq-agg")
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = readme.split("## The rules", 1)[1].split("\n\n", 2)[1]
    assert tuple(re.findall(r"^\| `([^`]+)` \|", table, re.M)) == RULES


def test_alias_gives_same_weights_as_canonical():
    lengths, adv = [3, 5, 7, 2], [1.0, -1.0, 1.0, -1.0]
    groups = [0, 0, 1, 1]
    for alias, rule in ALIASES.items():
        kw = {"max_length": 10} if aggregator(rule).needs_max_length else {}
        assert torch.equal(aggregation_weights(alias, lengths, adv, groups, **kw),
                           aggregation_weights(rule, lengths, adv, groups, **kw))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rule": "mean"}, "unknown aggregation rule 'mean'; valid rules: seq-agg"),
        ({"lengths": [1, 2]}, "one entry per response"),
        ({"lengths": [[1, 2, 3]]}, "lengths must be one-dimensional"),
        ({"lengths": [1, -2, 3]}, "non-negative; negative at positions [1]"),
        ({"advantages": [1.0, float("nan"), 0.0]}, "advantages must be finite; non-finite at positions [1]"),
        ({"advantages": [1.0, float("inf"), 0.0]}, "advantages must be finite"),
        ({"group_ids": [0, 0]}, "group_ids has 2 entries but there are 3 responses"),
        ({"rule": "dr-grpo"}, "needs max_length"),
        ({"rule": "dr-grpo", "max_length": 0}, "max_length must be positive"),
        ({"scope": "micro"}, "unknown scope 'micro'"),
    ],
)
def test_bad_input_raises_value_error_naming_the_problem(kwargs, message):
    call = {"rule": "balanced-agg", "lengths": [1, 2, 3], "advantages": [1.0, -1.0, 0.0], "group_ids": [0, 0, 0]}
    call.update(kwargs)
    rule = call.pop("rule")
    with pytest.raises(ValueError) as excinfo:
        aggregation_weights(rule, **call)
    assert message in str(excinfo.value)


def test_aggregate_checks_shapes():
    with pytest.raises(ValueError, match="mask shape"):
        aggregate(torch.zeros(2, 3), torch.ones(2, 4), torch.ones(2))
    with pytest.raises(ValueError, match="weights must be"):
        aggregate(torch.zeros(2, 3), torch.ones(2, 3), torch.ones(3))


# ------------------------------------------------------------------------------------------------
# Closed forms
# ------------------------------------------------------------------------------------------------


def test_closed_form_weights_for_one_group():
    lengths = [120, 80, 900, 700, 650]
    adv = group_advantages([1, 1, 0, 0, 0], [0] * 5)
    g = [0] * 5
    seq = aggregation_weights("seq-agg", lengths, adv, g).double()
    assert torch.allclose(seq, torch.tensor([1 / (5 * n) for n in lengths], dtype=torch.float64), rtol=1e-6)
    tok = aggregation_weights("token-agg", lengths, adv, g).double()
    assert torch.allclose(tok, torch.full((5,), 1 / 2450, dtype=torch.float64), rtol=1e-6)
    ba = aggregation_weights("balanced-agg", lengths, adv, g).double()
    expected = [(2 / 5) / 200] * 2 + [(3 / 5) / 2250] * 3
    assert torch.allclose(ba, torch.tensor(expected, dtype=torch.float64), rtol=1e-6)
    assert torch.allclose(aggregation_weights("seq-mean-token-sum", lengths, adv, g).double(),
                          torch.full((5,), 0.2, dtype=torch.float64))
    assert torch.allclose(aggregation_weights("dr-grpo", lengths, adv, g, max_length=1000).double(),
                          torch.full((5,), 1 / 5000, dtype=torch.float64))


def test_zero_advantage_response_gets_no_balanced_weight_and_is_not_counted_on_a_side():
    # Non-binary rewards: the middle response has A == 0 exactly.
    lengths = [10, 20, 30]
    adv = torch.tensor([1.0, 0.0, -1.0])
    ba = aggregation_weights("balanced-agg", lengths, adv, [0, 0, 0]).double()
    assert ba[1] == 0
    assert ba[0] == pytest.approx((1 / 3) / 10) and ba[2] == pytest.approx((1 / 3) / 30)


def test_zero_length_responses_and_empty_batches_stay_finite():
    w = aggregation_weights("seq-agg", [0, 4], [1.0, -1.0], [0, 0])
    assert torch.isfinite(w).all() and w[0] == 0
    assert aggregation_weights("token-agg", [0, 0], [1.0, -1.0], [0, 0]).eq(0).all()
    assert aggregation_weights("balanced-agg", [], [], []).numel() == 0


@pytest.mark.parametrize("G", [2, 5, 8, 16])
def test_seq_and_balanced_give_each_side_the_same_total_whatever_the_lengths(G):
    generator = torch.Generator().manual_seed(G)
    for k in range(1, G):
        lengths = torch.randint(1, 2000, (G,), generator=generator).double()
        lengths_, adv = binary_group(k, G, lengths.tolist())
        expected = math.sqrt(k * (G - k)) / G
        for rule in ("seq-agg", "balanced-agg", "balanced-agg-mass"):
            pos, neg = side_totals(rule, lengths_, adv, [0] * G)
            assert pos == pytest.approx(expected, rel=1e-6), (rule, k)
            assert neg == pytest.approx(expected, rel=1e-6), (rule, k)


def test_token_agg_couples_the_side_totals_to_mean_lengths():
    # k = 2 short positives, 3 long negatives: L+/k = 100 != L-/(G-k) = 750.
    lengths, adv = binary_group(2, 5, [120, 80, 900, 700, 650])
    pos, neg = side_totals("token-agg", lengths, adv, [0] * 5)
    assert neg > 3 * pos
    # The tilt is exactly the ratio of mean lengths (times the balanced totals, which are equal).
    assert neg / pos == pytest.approx(750 / 100, rel=1e-6)
    # and it vanishes when mean lengths agree even though individual lengths differ
    lengths, adv = binary_group(2, 5, [50, 150, 100, 90, 110])
    pos, neg = side_totals("token-agg", lengths, adv, [0] * 5)
    assert pos == pytest.approx(neg, rel=1e-9)


def test_all_rules_coincide_up_to_their_constant_when_lengths_are_equal():
    groups = [0] * 4 + [1] * 4 + [2] * 4
    adv = group_advantages([1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0], groups).double()
    lengths = torch.full((12,), 7.0, dtype=torch.float64)
    carried = {}
    for rule in RULES:
        w = aggregation_weights(rule, lengths, adv, groups, max_length=20).double()
        carried[rule] = w * adv  # the effective per-token coefficient on each response
    reference = carried["seq-agg"]
    for rule, values in carried.items():
        scale = values.abs().sum() / reference.abs().sum()
        assert torch.allclose(values, scale * reference, atol=1e-12), rule
    # Token-agg over the whole batch equals per-group token-agg when every group has equal tokens.
    assert torch.allclose(aggregation_weights("token-agg", lengths, adv, groups, scope="batch").double(),
                          aggregation_weights("token-agg", lengths, adv, groups, scope="group").double())


@pytest.mark.parametrize("rule", ["token-agg", "token-mean"])
def test_token_agg_defaults_to_daposs_batch_token_mean(rule):
    """Without a scope, token-agg (and verl's alias) pools the batch's tokens as DAPO and verl's token-mean
    do: groups of 18 and 17 tokens give every token 1/35 = 0.0286, not 1/(2*18) and 1/(2*17)."""
    lengths, adv, groups = [10, 8, 9, 8], [1.0, -1.0, 1.0, -1.0], [0, 0, 1, 1]
    w = aggregation_weights(rule, lengths, adv, groups).double()
    assert torch.allclose(w, torch.full((4,), 1 / 35, dtype=torch.float64))
    assert round(float(w[0]), 4) == 0.0286
    per_group = aggregation_weights(rule, lengths, adv, groups, scope="group").double()
    assert [round(float(x), 4) for x in per_group] == [0.0278, 0.0278, 0.0294, 0.0294]


def test_every_rule_defaults_to_its_registered_scope():
    lengths, adv, groups = [10, 8, 9, 3, 5, 2], [1.0, -1.0, 1.0, -1.0, 0.5, -0.5], [0, 0, 1, 1, 2, 2]
    for name in (*RULES, *ALIASES):
        kw = {"max_length": 12}
        assert torch.equal(aggregation_weights(name, lengths, adv, groups, **kw),
                           aggregation_weights(name, lengths, adv, groups, scope=default_scope(name), **kw)), name


def test_balanced_mass_equals_balanced_when_abs_advantage_is_constant_per_side():
    groups = [0] * 6 + [1] * 6
    adv = group_advantages([1, 1, 0, 0, 0, 0, 1, 0, 1, 0, 1, 1], groups)
    lengths = [5, 9, 30, 12, 40, 3, 8, 8, 21, 2, 13, 17]
    assert torch.allclose(aggregation_weights("balanced-agg", lengths, adv, groups),
                          aggregation_weights("balanced-agg-mass", lengths, adv, groups), rtol=1e-6)
    # With non-binary advantages the two differ.
    adv2 = torch.tensor([2.0, 0.5, -1, -1, -0.25, -0.25] * 2)
    assert not torch.allclose(aggregation_weights("balanced-agg", lengths, adv2, groups),
                              aggregation_weights("balanced-agg-mass", lengths, adv2, groups))


def test_batch_scope_pools_the_sides_over_the_batch():
    lengths = [10, 30, 20, 40]
    adv = [1.0, -1.0, 1.0, -1.0]
    w = aggregation_weights("balanced-agg", lengths, adv, [0, 0, 1, 1], scope="batch").double()
    # k = 2 of B = 4 positive, L+ = 30, L- = 70.
    expected = torch.tensor([0.5 / 30, 0.5 / 70, 0.5 / 30, 0.5 / 70], dtype=torch.float64)
    assert torch.allclose(w, expected)
    tok = aggregation_weights("token-agg", lengths, adv, [0, 0, 1, 1], scope="batch").double()
    assert torch.allclose(tok, torch.full((4,), 1 / 100, dtype=torch.float64))


def test_group_advantages():
    adv = group_advantages([1, 0, 0, 0, 5, 5], [0, 0, 0, 0, 1, 1], eps=0.0)
    assert adv[0] == pytest.approx(math.sqrt(3)) and adv[1] == pytest.approx(-math.sqrt(1 / 3))
    assert adv[4] == 0 and adv[5] == 0  # all-equal group
    sample = group_advantages([1, 0], [0, 0], std="sample", eps=0.0)
    assert sample[0] == pytest.approx(1 / math.sqrt(2))
    assert group_advantages([3, 1], ["a", "a"], std="none").tolist() == [1.0, -1.0]


# ------------------------------------------------------------------------------------------------
# The loss: agreement with the paper's formula, invariances
# ------------------------------------------------------------------------------------------------


def random_batch(seed, n_groups=4, G=6, T=12):
    gen = torch.Generator().manual_seed(seed)
    B = n_groups * G
    rewards = torch.randint(0, 2, (B,), generator=gen).double()
    groups = torch.arange(n_groups).repeat_interleave(G)
    adv = group_advantages(rewards, groups).double()
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).double()
    per_token = torch.randn(B, T, generator=gen, dtype=torch.float64) * adv.double()[:, None]
    return per_token, mask, adv, groups, lengths


@pytest.mark.parametrize("rule", ["seq-agg", "token-agg", "balanced-agg"])
@pytest.mark.parametrize("scope", ["group", "batch"])
def test_weighted_sum_equals_the_papers_formula(rule, scope):
    per_token, mask, adv, groups, lengths = random_batch(1)
    w = aggregation_weights(rule, lengths, adv, groups, scope=scope).double()
    loss = aggregate(per_token, mask, w)
    expected = reference_loss(rule, per_token, mask, adv.tolist(), groups.tolist(), scope=scope)
    assert float(loss) == pytest.approx(float(expected), rel=1e-10)


@pytest.mark.parametrize("rule", RULES)
def test_permutation_micro_batching_and_duplication_leave_the_loss_unchanged(rule):
    per_token, mask, adv, groups, lengths = random_batch(2)
    kw = {"max_length": 12}
    params = per_token.clone().requires_grad_(True)
    w = aggregation_weights(rule, lengths, adv, groups, **kw).double()
    loss = aggregate(params, mask, w)
    (grad,) = torch.autograd.grad(loss, params)
    loss = loss.detach()

    # permutation: shuffle rows, compute weights from the shuffled batch
    perm = torch.randperm(len(groups), generator=torch.Generator().manual_seed(3))
    w_perm = aggregation_weights(rule, lengths[perm], adv[perm], groups[perm], **kw).double()
    assert torch.allclose(w_perm, w[perm], rtol=1e-12, atol=0)
    assert float(aggregate(per_token[perm], mask[perm], w_perm)) == pytest.approx(float(loss), rel=1e-12)

    # micro-batches: weights from the whole (shuffled) batch, loss summed over uneven chunks
    params2 = per_token.clone().requires_grad_(True)
    total = 0.0
    for chunk in torch.tensor_split(perm, [3, 4, 11, 20]):
        part = aggregate(params2[chunk], mask[chunk], w[chunk])
        part.backward()
        total += float(part.detach())
    assert total == pytest.approx(float(loss), rel=1e-12)
    assert torch.allclose(params2.grad, grad, rtol=1e-12, atol=1e-15)

    # duplicating the batch: as extra groups, or as bigger groups (a plain token sum doubles)
    twice = lambda x: torch.cat([x, x])  # noqa: E731
    copies = 1 if aggregator(rule).per_group else 2
    for dup_groups in (torch.cat([groups, groups + 100]), twice(groups)):
        w2 = aggregation_weights(rule, twice(lengths), twice(adv), dup_groups, **kw).double()
        loss2 = aggregate(twice(per_token), twice(mask), w2)
        assert float(loss2) == pytest.approx(copies * float(loss), rel=1e-12)


def test_group_ids_in_any_order_and_of_any_type():
    lengths = [3, 4, 5, 6, 7, 8]
    adv = [1.0, -1.0, -0.5, 1.0, 0.5, -1.0]
    by_int = aggregation_weights("balanced-agg", lengths, adv, [7, 3, 7, 3, 7, 3])
    by_str = aggregation_weights("balanced-agg", lengths, adv, ["p7", "p3", "p7", "p3", "p7", "p3"])
    assert torch.equal(by_int, by_str)
    assert torch.allclose(by_int.double(), reference_weights("balanced-agg", lengths, adv, [7, 3, 7, 3, 7, 3]))


def test_weights_dtype_follows_advantages():
    assert aggregation_weights("seq-agg", [1, 2], torch.tensor([1.0, -1.0]), [0, 0]).dtype == torch.float32
    assert aggregation_weights("seq-agg", [1, 2], torch.tensor([1.0, -1.0], dtype=torch.float64),
                               [0, 0]).dtype == torch.float64
    assert aggregation_weights("seq-agg", [1, 2], [1, -1], [0, 0]).dtype == torch.float32


class NumpyGroups:
    """The formulas' interface (balagg.aggregation.rules.Groups) over numpy arrays: a formula that used
    anything of torch beyond it would fail here."""

    def __init__(self, lengths, advantages, group_ids, max_length=None, alpha=1.0, padded_width=None):
        import numpy as np

        self.np = np
        self.lengths, self.advantages = np.asarray(lengths, float), np.asarray(advantages, float)
        self.index = np.unique(np.asarray(group_ids), return_inverse=True)[1]
        self.count = int(self.index.max()) + 1
        self.size = self.sum(np.ones_like(self.lengths))
        self.max_length, self.alpha, self.padded_width = max_length, alpha, padded_width

    def sum(self, values):
        return self.np.bincount(self.index, weights=values, minlength=self.count)[self.index]

    def divide(self, numerator, denominator):
        zero = denominator == 0
        return self.np.where(zero, 0.0, numerator / self.np.where(zero, 1.0, denominator))

    def where(self, mask, chosen, otherwise):
        return self.np.where(mask, chosen, otherwise)

    def constant(self, value):
        return self.np.full_like(self.lengths, value)

    def longest(self):
        return float(self.lengths.max())


@pytest.mark.parametrize("rule", RULES)
def test_each_formula_needs_only_the_groups_interface(rule):
    """Every rule's formula gives the same weights on numpy arrays as aggregation_weights on tensors."""
    lengths = [3, 0, 7, 2, 9, 4, 0.5, 6, 12]
    advantages = [1.0, -1.0, 0.0, -0.5, 2.0, 1.0, -1.0, 0.0, -2.0]
    group_ids = [0, 0, 0, 1, 1, 2, 2, 2, 2]
    record = aggregator(rule)
    expected = aggregation_weights(rule, lengths, torch.tensor(advantages, dtype=torch.float64), group_ids,
                                   scope="group", max_length=16, alpha=0.75, micro_batch_ids=group_ids)
    weights = weight_formula(rule)(NumpyGroups(lengths, advantages, group_ids, max_length=16.0, alpha=0.75))
    if record.per_group and not record.needs_micro_batches:
        weights = weights / 3
    assert weights.tolist() == pytest.approx(expected.tolist(), rel=1e-12, abs=0)


# ------------------------------------------------------------------------------------------------
# Property-based: the vectorised weights against the loop version
# ------------------------------------------------------------------------------------------------


@st.composite
def batches(draw):
    n = draw(st.integers(1, 40))
    lengths = draw(st.lists(st.integers(0, 500), min_size=n, max_size=n))
    advantages = draw(st.lists(
        st.one_of(st.just(0.0), st.floats(0.01, 5), st.floats(-5, -0.01)), min_size=n, max_size=n))
    groups = draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    return lengths, advantages, groups


@settings(max_examples=150, deadline=None)
@given(batches(), st.sampled_from(RULES), st.sampled_from(["group", "batch"]))
def test_vectorised_weights_match_the_loop_version(batch, rule, scope):
    lengths, advantages, groups = batch
    got = aggregation_weights(rule, lengths, torch.tensor(advantages, dtype=torch.float64), groups,
                              scope=scope, max_length=512)
    expected = reference_weights(rule, lengths, advantages, groups, scope=scope, max_length=512)
    assert torch.allclose(got, expected, rtol=1e-9, atol=1e-15)
    assert (got >= 0).all()


# ------------------------------------------------------------------------------------------------
# Diagnostics
# ------------------------------------------------------------------------------------------------


def test_length_diagnostics_values():
    # group 0: mixed, positives 10 and 20, negatives 40 and 50; group 1: all correct, lengths 5 and 15
    lengths = [10, 20, 40, 50, 5, 15]
    groups = [0, 0, 0, 0, 1, 1]
    adv = group_advantages([1, 1, 0, 0, 1, 1], groups)
    d = length_diagnostics(lengths, adv, groups, max_length=64)
    values = torch.tensor(lengths, dtype=torch.float64)
    assert d["len_mean"] == pytest.approx(float(values.mean()))
    assert d["len_cv"] == pytest.approx(float(values.std(unbiased=False) / values.mean()))
    cv0 = float(torch.tensor([10.0, 20, 40, 50]).std(unbiased=False) / 30)
    cv1 = 5 / 10
    assert d["len_cv_within_group"] == pytest.approx((cv0 + cv1) / 2)
    assert d["len_pos_mean"] == 15 and d["len_neg_mean"] == 45 and d["len_gap"] == 30
    assert d["mixed_group_frac"] == 0.5
    for rule in RULES:
        present = rule not in MICRO_BATCH_RULES  # its weights belong to a micro-batch split, not to the batch
        assert (f"side_weight/{rule}/pos" in d) == present and (f"side_weight/{rule}/neg" in d) == present
    # seq/BA balance the sides; token-agg tilts towards the longer (negative) side
    assert d["side_weight/balanced-agg/pos"] == pytest.approx(d["side_weight/balanced-agg/neg"])
    assert d["side_weight/seq-agg/pos"] == pytest.approx(d["side_weight/seq-agg/neg"])
    assert d["side_weight/token-agg/neg"] == pytest.approx(3 * d["side_weight/token-agg/pos"])


def test_length_diagnostics_without_mixed_groups_is_nan_not_wrong():
    d = length_diagnostics([3, 4], [0.0, 0.0], [0, 0])
    assert math.isnan(d["len_gap"]) and d["mixed_group_frac"] == 0
    assert "side_weight/dr-grpo/pos" not in d  # no max_length given


# ------------------------------------------------------------------------------------------------
# token-agg-microbatch: verl's legacy FSDP token-mean (issue verl#5625)
# ------------------------------------------------------------------------------------------------


def verl_agg_loss_token_mean(loss_mat, loss_mask):
    """verl ``agg_loss(loss_agg_mode="token-mean")`` as the legacy FSDP actor ran it (verl
    ``verl/trainer/ppo/core_algos.py``, quoted in verl issue 5625): ``masked_sum(loss_mat, loss_mask) /
    batch_num_tokens * dp_size`` with an empty ``global_batch_info``, so ``batch_num_tokens`` falls back
    to ``loss_mask.sum()`` (the micro-batch's own tokens) and ``dp_size`` to 1."""
    batch_num_tokens = loss_mask.sum()
    dp_size = 1
    return (loss_mat * loss_mask).sum() / batch_num_tokens * dp_size


def verl_legacy_update(params, mask, rank_micro_batches):
    """verl's legacy ``DataParallelPPOActor.update_policy`` for one mini-batch (dp_actor.py before
    verl#6067): on every rank, per micro-batch ``loss = policy_loss / self.gradient_accumulation``;
    ``loss.backward()``; FSDP then averages the ranks' gradients. Returns (loss, gradient)."""
    ranks = len(rank_micro_batches)
    total, grad = 0.0, torch.zeros_like(params)
    for micro_batches in rank_micro_batches:
        gradient_accumulation = len(micro_batches)
        for rows in micro_batches:
            p = params.detach().clone().requires_grad_(True)
            loss = verl_agg_loss_token_mean(p[rows], mask[rows]) / gradient_accumulation
            loss.backward()
            total += float(loss.detach()) / ranks
            grad += p.grad / ranks  # FSDP / DDP gradient averaging over data-parallel ranks
    return total, grad


@pytest.mark.parametrize("ranks", [1, 2])
def test_token_agg_microbatch_equals_verls_legacy_loop(ranks):
    per_token, mask, adv, groups, lengths = random_batch(4, n_groups=4, G=4)  # 16 responses, lengths vary
    # per rank 2 micro-batches of 4 (ranks=2) or 4 micro-batches of 4 (ranks=1), in a shuffled order
    order = torch.randperm(16, generator=torch.Generator().manual_seed(5))
    chunks = list(order.split(4))
    per_rank = len(chunks) // ranks
    rank_micro_batches = [chunks[r * per_rank:(r + 1) * per_rank] for r in range(ranks)]
    expected_loss, expected_grad = verl_legacy_update(per_token, mask, rank_micro_batches)

    micro_batch_ids = torch.empty(16, dtype=torch.long)
    for m, rows in enumerate(chunks):
        micro_batch_ids[rows] = m
    w = aggregation_weights("token-agg-microbatch", lengths, adv, groups, micro_batch_ids=micro_batch_ids).double()
    tokens = {m: float(lengths[rows].sum()) for m, rows in enumerate(chunks)}
    assert torch.allclose(w, torch.tensor([1 / (tokens[int(m)] * 4) for m in micro_batch_ids], dtype=torch.float64))
    params = per_token.clone().requires_grad_(True)
    loss = aggregate(params, mask, w)
    loss.backward()
    assert float(loss) == pytest.approx(expected_loss, rel=1e-12)
    assert torch.allclose(params.grad, expected_grad, rtol=1e-12, atol=1e-15)
    # a mean of micro-batch token means is not the token mean (the micro-batches' token counts differ)
    assert len(set(tokens.values())) > 1
    token_mean = aggregate(per_token, mask, aggregation_weights("token-agg", lengths, adv, groups, scope="batch").double())
    assert abs(float(token_mean) - expected_loss) > 1e-6


def test_token_agg_microbatch_edge_cases():
    # one micro-batch: the token mean of the call; an empty micro-batch gets weight 0; ids of any type
    assert torch.allclose(aggregation_weights("token-agg-microbatch", [2, 6], [1.0, -1.0], [0, 0]),
                          torch.tensor([1 / 8, 1 / 8]))
    w = aggregation_weights("token-agg-microbatch", [0, 0, 3, 1], [1.0, -1.0, 1.0, -1.0], [0, 0, 1, 1],
                            micro_batch_ids=["a", "a", "b", "b"])
    assert torch.allclose(w, torch.tensor([0.0, 0.0, 1 / 8, 1 / 8]))
    # the scope does not change it
    assert torch.equal(aggregation_weights("token-agg-microbatch", [3, 1], [1.0, -1.0], [0, 1], scope="group",
                                           micro_batch_ids=[0, 1]),
                       aggregation_weights("token-agg-microbatch", [3, 1], [1.0, -1.0], [0, 1], scope="batch",
                                           micro_batch_ids=[0, 1]))
    with pytest.raises(ValueError, match="3 entries but there are 2"):
        aggregation_weights("token-agg-microbatch", [3, 1], [1.0, -1.0], [0, 1], micro_batch_ids=[0, 1, 2])


def test_side_mass_ratio_is_the_length_ratio_under_token_agg_and_one_for_the_balanced_rules():
    # one binary group, k = 3 of G = 8 correct: correct answers 20 tokens, wrong ones 60
    lengths = [20.0] * 3 + [60.0] * 5
    advantages = group_advantages([1] * 3 + [0] * 5, [0] * 8)
    stats = length_diagnostics(lengths, advantages, [0] * 8, rules=["token-agg", "seq-agg", "balanced-agg"])
    assert stats["side_mass_ratio/token-agg"] == pytest.approx(3.0)
    assert stats["side_mass_ratio/seq-agg"] == pytest.approx(1.0)
    assert stats["side_mass_ratio/balanced-agg"] == pytest.approx(1.0)


def test_per_token_weight_of_long_versus_short_correct_responses():
    # two correct (10 and 40 tokens) and two wrong answers in one group
    lengths, groups = [10.0, 40.0, 25.0, 25.0], [0, 0, 0, 0]
    advantages = group_advantages([1, 1, 0, 0], groups)
    stats = length_diagnostics(lengths, advantages, groups, rules=["seq-agg", "token-agg", "balanced-agg"])
    ratio = {r: stats[f"token_weight/{r}/pos_long"] / stats[f"token_weight/{r}/pos_short"]
             for r in ("seq-agg", "token-agg", "balanced-agg")}
    assert ratio["seq-agg"] == pytest.approx(10 / 40)  # seq-agg: 1 / |o| per token
    assert ratio["token-agg"] == pytest.approx(1.0) and ratio["balanced-agg"] == pytest.approx(1.0)
    only_one_length = length_diagnostics([10.0, 10.0, 5.0], group_advantages([1, 1, 0], [0] * 3), [0] * 3,
                                         rules=["seq-agg"])
    assert math.isnan(only_one_length["token_weight/seq-agg/pos_long"])


# ------------------------------------------------------------------------------------------------
# The rules the field compares BA with
# ------------------------------------------------------------------------------------------------


def test_delta_l_norm_is_the_authors_advantage_scaling_and_allavg_mean():
    """ΔL Normalization as zerolllin/Delta-L-Normalization computes it (verl/trainer/ppo/core_algos.py,
    ``use_grpopp``): each advantage times r_i / mean(r), r_i = (|o_i| / mean |o|)^-alpha over the whole
    batch, then ``masked_mean_allavg``: (loss * mask).mean(), a mean over B x the padded width. Written out
    here in torch, step by step, for both published alphas; the rule at its default scope (batch) must give
    the same per-response coefficient on sum_t l_it."""
    lengths = torch.tensor([12.0, 3.0, 7.0, 16.0, 1.0, 9.0, 5.0, 16.0])
    width = 16  # rollouts padded to the budget
    for alpha in ALPHA.published:
        ratio = (lengths / lengths.mean()) ** -alpha
        scale = ratio / ratio.mean()  # the advantage multiplier
        per_response = scale / (len(lengths) * width)  # masked_mean_allavg over [B, width]
        got = aggregation_weights("delta-l-norm", lengths, torch.ones(8), torch.arange(8), scope="batch",
                                  max_length=width, alpha=alpha).double()
        assert torch.allclose(got, per_response.double(), rtol=1e-6)
    assert DEFAULT_SCOPES["delta-l-norm"] == "batch" and ALPHA.default == 1.0 and 0.75 in ALPHA.published


def test_delta_l_norm_weights_sum_to_one_over_the_budget_and_alpha_zero_is_dr_grpo():
    lengths, adv, groups = [4, 8, 2, 0, 6, 6], [1.0, -1.0, 1.0, -1.0, 0.0, 1.0], [0, 0, 0, 1, 1, 1]
    for scope in ("group", "batch"):
        w = aggregation_weights("delta-l-norm", lengths, adv, groups, scope=scope, max_length=10, alpha=0.75).double()
        assert float(w.sum()) == pytest.approx(1 / 10)
        assert w[3] == 0  # an empty response carries nothing (the reference would divide by zero)
    w = aggregation_weights("delta-l-norm", lengths, adv, groups, max_length=10, alpha=1.0).double()
    assert w[0] * 4 == pytest.approx(float(w[1] * 8))  # w ~ 1/L inside a group
    # alpha = 0: every non-empty response of a group weighs 1/G' over the budget (Dr. GRPO among present ones)
    w0 = aggregation_weights("delta-l-norm", [4, 8, 2], [1.0, -1.0, 1.0], [0, 0, 0], max_length=10, alpha=0.0)
    assert torch.allclose(w0.double(), aggregation_weights("dr-grpo", [4, 8, 2], [1.0, -1.0, 1.0], [0, 0, 0],
                                                           max_length=10).double())
    with pytest.raises(ValueError, match="alpha must be"):
        aggregation_weights("delta-l-norm", lengths, adv, groups, max_length=10, alpha=-1)


def test_seq_mean_token_sum_norm_divides_by_the_padded_width_not_the_budget():
    lengths, adv, groups = [3, 5, 2, 4], [1.0, -1.0, 1.0, -1.0], [0, 0, 1, 1]
    norm = aggregation_weights("seq-mean-token-sum-norm", lengths, adv, groups).double()
    assert torch.allclose(norm, torch.full((4,), 1 / (2 * 2 * 5), dtype=torch.float64))  # padded to the longest
    padded = aggregation_weights("seq-mean-token-sum-norm", lengths, adv, groups, padded_width=16).double()
    budget = aggregation_weights("dr-grpo", lengths, adv, groups, max_length=16).double()
    assert torch.allclose(padded, budget)  # equal only when the batch is padded to the budget
    assert not torch.allclose(norm, budget)


def test_token_sum_is_one_whatever_the_scope_and_prompt_mean_is_token_agg_per_group():
    lengths, adv, groups = [3, 5, 2, 4, 9], [1.0, -1.0, 1.0, -1.0, 0.5], [0, 0, 1, 1, 1]
    for scope in ("group", "batch"):
        assert torch.equal(aggregation_weights("token-sum", lengths, adv, groups, scope=scope), torch.ones(5))
    prompt = aggregation_weights("prompt-mean", lengths, adv, groups, scope=DEFAULT_SCOPES["prompt-mean"]).double()
    expected = torch.tensor([1 / 8, 1 / 8, 1 / 15, 1 / 15, 1 / 15], dtype=torch.float64) / 2
    assert torch.allclose(prompt, expected)
    assert torch.equal(prompt, aggregation_weights("token-agg", lengths, adv, groups, scope="group").double())


def test_bnpo_is_the_mean_of_micro_batch_token_means():
    """TRL's bnpo: each micro-batch's token mean / gradient accumulation (trl GRPOTrainer._compute_loss)."""
    lengths = [3, 5, 2, 4]
    w = aggregation_weights("bnpo", lengths, [1.0] * 4, [0, 0, 1, 1], micro_batch_ids=[0, 0, 1, 1]).double()
    assert torch.allclose(w, torch.tensor([1 / 16, 1 / 16, 1 / 12, 1 / 12], dtype=torch.float64))
