"""balagg conformance against verl 0.9.1's own loss code (.ci/verl-tests runs these in verl's environment;
the main venv skips them): every loss_agg_mode through the engine workers' ppo_loss, the agg_loss fallback
without batch info (the legacy worker's per-micro-batch token mean, verl#5625/#7321), the padded width as
seq-mean-token-sum-norm's divisor (verl#3741), and balagg's own plug-in for every rule it offers."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from balagg.aggregation.rules import AGGREGATORS  # noqa: E402
from balagg.conformance.batches import seeded_batches  # noqa: E402
from balagg.conformance.check import check_engine  # noqa: E402
from balagg.conformance.engines import adapter  # noqa: E402


@pytest.fixture(scope="module")
def results():
    return {result.label: result for result in check_engine(adapter("verl"), seeded_batches(2))}


def test_the_engine_workers_modes_are_the_rules_they_name(results):
    for mode, rule in (("token-mean", "token-agg"), ("token-sum", "token-sum"),
                       ("seq-mean-token-sum", "seq-mean-token-sum"), ("seq-mean-token-mean", "seq-agg")):
        result = results[f"loss_agg_mode={mode} (engine workers)"]
        assert result.match == rule and result.conforms and all(result.invariances[name] for name in
                                                                ("accumulation", "micro-batch", "data-parallel"))


def test_seq_mean_token_sum_norm_divides_by_the_padded_width_unless_a_constant_is_set(results):
    norm = results["loss_agg_mode=seq-mean-token-sum-norm (engine workers)"]
    assert norm.match == "seq-mean-token-sum-norm" and norm.conforms is False  # it claims Dr. GRPO
    assert norm.invariances["padding"] is False and "verl#3741" in norm.findings[0]
    assert results["loss_agg_mode=seq-mean-token-sum-norm (loss_scale_factor=budget)"].match == "dr-grpo"


def test_without_batch_info_token_mean_is_the_legacy_per_micro_batch_mean(results):
    legacy = results["loss_agg_mode=token-mean (without batch info)"]
    assert legacy.match == "token-agg-microbatch" and legacy.invariances["accumulation"] is False
    assert "verl#5625" in legacy.findings[0]


def test_the_balagg_plug_in_is_every_rule_it_offers(results):
    offered = [rule.name for rule in AGGREGATORS if rule.verl_estimator]
    assert "token-agg-microbatch" not in offered  # an estimator cannot see the actor's micro-batches
    for rule in offered:
        [result] = [r for label, r in results.items() if label.startswith(f"adv_estimator=balagg-{rule} ")]
        assert result.conforms, (rule, result.findings)
