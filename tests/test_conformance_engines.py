"""balagg conformance against SkyRL 0.4.0, OpenRLHF 0.11.2 and AReaL 1.0.4 (.ci/engine-conformance runs
these in an environment holding the three engines; elsewhere they skip). prompt-mean is token-agg at scope
group, tested against SkyRL's own prompt_mean reduction."""

from __future__ import annotations

import importlib.metadata

import pytest

from balagg.conformance.batches import seeded_batches
from balagg.conformance.check import check_engine
from balagg.conformance.compare import TOLERANCE
from balagg.conformance.engines import adapter


def installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def checked(engine: str) -> dict:
    if not installed(engine):
        pytest.skip(f"{engine} is not installed (.ci/engine-conformance installs it)")
    return {result.label: result for result in check_engine(adapter(engine), seeded_batches(2))}


def test_skyrl_prompt_mean_is_token_agg_per_group_and_its_reductions_are_their_rules():
    results = checked("skyrl")
    prompt = results["loss_reduction=prompt_mean"]
    assert prompt.match == "prompt-mean" and prompt.conforms
    assert "token-agg @group" in prompt.matches  # the alias: the same weights as token-agg at scope group
    assert prompt.deviations["token-agg"]["1 micro-batch"] > 0.01  # and not the batch's token mean
    assert results["loss_reduction=token_mean"].match == "token-agg"
    assert results["loss_reduction=sequence_mean"].match == "seq-agg"
    assert results["loss_reduction=seq_mean_token_sum_norm (max_seq_len=budget)"].match == "dr-grpo"
    legacy = results["loss_reduction=token_mean_legacy"]
    assert legacy.match == "token-agg-microbatch" and legacy.invariances["accumulation"] is False
    for result in results.values():
        assert result.invariances["data-parallel"] and result.largest_deviation <= TOLERANCE


def test_openrlhf_with_its_optimizer_step_normalisers_and_without():
    results = checked("openrlhf")
    assert results["token_level_loss=True (optimizer-step normalisers)"].match == "token-agg"
    assert results["token_level_loss=False (optimizer-step normalisers)"].match == "seq-agg"
    legacy = results["token_level_loss=True (without batch info)"]
    assert legacy.match == "token-agg-microbatch" and legacy.conforms is False
    assert "OpenRLHF#1249" in legacy.findings[0]


def test_areal_token_mean_holds_under_packing_and_data_parallel():
    [result] = checked("areal").values()
    assert result.match == "token-agg" and result.conforms
    assert result.invariances["packing"] is True and result.invariances["data-parallel"] is True
