"""balagg conformance: the check flags broken reductions and passes a correct one; TRL's loss types equal
the registry's rules; bad input is one line; docs/conformance.md is generated from the registry and the
measured record."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from balagg.conformance import report
from balagg.conformance.batches import seeded_batches
from balagg.conformance.check import check_engine
from balagg.conformance.compare import TOLERANCE, Candidate, deviation
from balagg.conformance.engines import EngineUnavailable, adapter
from balagg.conformance.engines.base import Adapter, Option
from balagg.conformance.engines.fake import FakeEngine
from balagg.conformance.engines.stubs import inert_modules
from balagg.conformance.layouts import BY_NAME
from balagg.conformance.probe import measure

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fake_results():
    return {result.option: result for result in check_engine(FakeEngine(), seeded_batches(2))}


def test_the_batches_hold_what_engines_differ_on():
    for batch in seeded_batches(3):
        assert (batch.advantages == 0).any() and (batch.advantages > 0).any() and (batch.advantages < 0).any()
        assert (batch.lengths == batch.budget).any() and (batch.lengths < batch.budget).any()
        assert (batch.lengths >= 1).all() and len(set(batch.lengths.tolist())) > 3


def test_the_batches_tell_balanced_agg_from_its_mass_generalisation():
    """With binary rewards every advantage of a side has one size, and balanced-agg-mass is balanced-agg:
    the graded group is what lets the check name an engine's balanced option by the rule it really is."""
    from balagg.aggregation import aggregation_weights

    for batch in seeded_batches(3):
        plain, mass = (aggregation_weights(rule, batch.lengths, batch.advantages, batch.group_ids)
                       for rule in ("balanced-agg", "balanced-agg-mass"))
        assert (plain - mass).abs().max() > 10 * TOLERANCE
    # every seed, also those whose graded positives were drawn at length 1 both (9, 133, 140, 261)
    from balagg.conformance.batches import grpo_batch

    for seed in range(300):
        batch = grpo_batch(seed)
        plain, mass = (aggregation_weights(rule, batch.lengths, batch.advantages, batch.group_ids)
                       for rule in ("balanced-agg", "balanced-agg-mass"))
        assert (plain - mass).abs().max() > 10 * TOLERANCE, seed


def test_a_correct_token_mean_passes_every_split(fake_results):
    correct = fake_results["correct"]
    assert correct.conforms and correct.match == "token-agg" and correct.largest_deviation <= TOLERANCE
    assert all(correct.invariances.values()) and not correct.findings
    assert set(correct.layouts) == set(BY_NAME)  # every split ran, the gloo ranks and the packed rows too


def test_a_per_micro_batch_mean_is_flagged_and_named(fake_results):
    result = fake_results["per-micro-batch-mean"]
    assert result.conforms is False and result.match == "token-agg-microbatch"
    assert result.invariances["accumulation"] is False and result.invariances["micro-batch"] is False
    assert result.deviations["token-agg"]["1 micro-batch"] <= TOLERANCE  # one micro-batch hides it
    assert result.deviations["token-agg"]["4 micro-batches"] > 0.1
    assert "claims token-agg but equals token-agg-microbatch" in result.findings[0]


def test_an_unmasked_numerator_is_flagged_although_every_loss_token_has_the_right_weight(fake_results):
    """Its loss tokens' weights are token-agg's; only the padding's gradient gives it away."""
    result = fake_results["unmasked-numerator"]
    assert result.conforms is False and result.match == "none" and result.invariances["padding"] is False
    batch = seeded_batches(1)[0]
    measured = measure(FakeEngine(), Option("unmasked-numerator"), batch, BY_NAME["1 micro-batch"])
    expected = Candidate("token-agg", "batch").weights(batch, BY_NAME["1 micro-batch"])
    observable = batch.advantages != 0
    assert torch.allclose(measured.weights[observable], expected[observable], rtol=1e-12)
    assert measured.padding_gradient > 0.1 and deviation(measured, expected, batch) > 0.1


def test_a_missing_data_parallel_scale_is_flagged_only_by_the_ranks(fake_results):
    result = fake_results["missing-dp-scale"]
    assert result.conforms is False and result.invariances["data-parallel"] is False
    off = {layout for layout, dev in result.deviations["token-agg"].items() if dev > TOLERANCE}
    assert off == {"2 ranks x 2 micro-batches"}
    assert result.deviations["token-agg"]["2 ranks x 2 micro-batches"] == pytest.approx(0.5)


def test_a_weight_that_varies_inside_a_response_is_no_rule():
    batch = seeded_batches(1)[0]

    class Tilted(FakeEngine):
        def run_rank(self, option, step):
            for micro in step.micro_batches:
                ramp = 1 + torch.arange(micro.mask.shape[1], dtype=torch.float64) / 100
                (-(micro.advantages[:, None] * torch.exp(micro.log_prob - micro.old_log_prob)) * micro.mask * ramp
                 ).sum().backward()

    measured = measure(Tilted(), Option("tilted"), batch, BY_NAME["1 micro-batch"])
    assert measured.token_spread > 1e-3
    assert deviation(measured, measured.weights.nan_to_num(0.0), batch) > 1e-3


def test_code_that_cannot_run_is_reported_and_never_conforms():
    class Broken(FakeEngine):
        def run_rank(self, option, step):
            raise RuntimeError("the engine's loss raised")

    [result] = check_engine(Broken(), seeded_batches(1), [Option("x", claims="token-agg")], distributed=False)
    assert result.match == "not run" and result.conforms is None and result.matches == []
    assert "the engine's loss raised" in result.findings[0]
    row = report.rows([result])[0]
    assert row["equals"] == "not run" and row["conforms"] == "-" and row["accumulation"] == "-"


# --- TRL 1.16, in this environment ----------------------------------------------------------------------


@pytest.mark.slow
def test_trls_loss_types_equal_the_registrys_rules():
    results = {result.label: result for result in check_engine(adapter("trl"), seeded_batches(2))}
    assert results["loss_type=dapo"].match == "token-agg" and results["loss_type=dapo"].conforms
    assert results["loss_type=grpo"].match == "seq-agg" and results["loss_type=grpo"].conforms
    assert results["loss_type=dr_grpo"].match == "dr-grpo" and results["loss_type=dr_grpo"].conforms
    bnpo = results["loss_type=bnpo"]  # the alias: a mean of micro-batch token means
    assert bnpo.match == "token-agg-microbatch" and bnpo.invariances["accumulation"] is False
    assert results["loss_type=cispo (epsilon_high=5.0)"].match == "token-agg"
    assert results["loss_type=cispo"].largest_deviation == pytest.approx(0.8)  # capped at epsilon = 0.2
    for result in results.values():
        assert not result.error and result.invariances["data-parallel"] is True
    # what docs/conformance.md says of TRL is what this run measures
    assert report.differences(report.rows(results.values()), report.read_csv(ROOT / "docs" / "conformance.csv")) == []


# --- bad input ----------------------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "balagg", "conformance", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_unknown_engine_and_option_are_one_line(tmp_path):
    result = run_cli("--engine", "megatron", "--out", str(tmp_path))
    assert result.returncode == 2 and result.stderr.strip() == (
        "error: unknown engine 'megatron'; known engines: trl, verl, skyrl, openrlhf, areal (and fake)")
    result = run_cli("--engine", "fake", "--option", "token-mean", "--out", str(tmp_path))
    assert result.returncode == 2
    assert "not checked: fake: has no option 'token-mean'; its options: correct, per-micro-batch-mean" in result.stderr


def test_an_engine_that_is_not_installed_is_one_line_and_nothing_is_claimed(tmp_path, monkeypatch):
    from balagg.commands import conformance as command

    class Missing(Adapter):
        name, distribution, pinned, install = "ghost", "ghost-engine", "1.0", "pip install ghost-engine==1.0"

        def load(self):
            self.import_module("ghost_engine.loss")

    monkeypatch.setattr("balagg.conformance.engines.adapter", lambda name: Missing())
    args = command.argparse.Namespace(engine="ghost", option=None, batches=1, no_distributed=True, out=str(tmp_path),
                                      record=None, check=None, docs=None)
    assert command.run(args) == 2
    assert report.read_csv(tmp_path / "conformance.csv") == []
    assert "ghost: not installed; pip install ghost-engine==1.0" in (tmp_path / "conformance.md").read_text()


def test_a_changed_loss_signature_is_one_line():
    import balagg.aggregation as module

    engine = FakeEngine()
    engine.distribution, engine.pinned = "torch", "2.13.0"
    with pytest.raises(EngineUnavailable) as error:
        engine.require(module, "aggregate", ("per_token_loss", "mask", "weights", "dp_size"))
    assert str(error.value).startswith("fake: balagg.aggregation.aggregate changed its signature in torch ")
    assert "(no dp_size)" in str(error.value) and "pip install 'torch==2.13.0'" in str(error.value)


def test_roll_is_said_to_be_off_the_index():
    with pytest.raises(EngineUnavailable, match="roll: not on the package index"):
        adapter("roll")


def test_inert_stubs_import_call_subclass_and_decorate():
    inert_modules(["balagg_absent_engine_dependency"])
    from balagg_absent_engine_dependency.util import remote, Float  # noqa: F401

    @remote(num_gpus=1)
    def function(x):
        return x + 1

    assert function(1) == 2 and remote(function) is function

    class Actor(remote):
        pass

    assert Float[torch.Tensor, "b t"] is not None and Actor() is not None


# --- the record and the docs page -----------------------------------------------------------------------


def test_the_record_check_names_what_changed(fake_results):
    recorded = report.rows(fake_results.values())
    measured = [dict(row) for row in recorded]
    measured[0]["equals"], measured[1]["accumulation"] = "token-agg-microbatch", "yes"
    lines = report.differences(measured, recorded)
    assert lines == ["fake correct (default): equals token-agg -> token-agg-microbatch",
                     "fake per-micro-batch-mean (default): accumulation no -> yes"]
    assert report.differences(recorded, recorded) == []


def test_docs_conformance_is_generated_from_the_registry_and_the_record():
    from balagg.conformance.engines import NOT_ON_THE_INDEX

    recorded = report.read_csv(ROOT / "docs" / "conformance.csv")
    assert {row["engine"] for row in recorded} >= {"trl", "verl", "skyrl", "openrlhf", "areal"}
    page = report.name_map_page(recorded, "docs/conformance.csv", NOT_ON_THE_INDEX.values())
    assert (ROOT / "docs" / "conformance.md").read_text() == page, (
        "docs/conformance.md is stale: python -m balagg conformance --engine none --docs docs/conformance.md")


def test_the_report_and_figure_are_written(tmp_path, fake_results):
    table = report.rows(fake_results.values())
    written = report.write(table, ["roll: not on the package index"], tmp_path)
    assert [path.name for path in written] == ["conformance.csv", "conformance.md", "conformance.png"]
    assert report.read_csv(tmp_path / "conformance.csv") == table
    text = (tmp_path / "conformance.md").read_text()
    assert "| fake | - | per-micro-batch-mean | token-agg | `token-agg-microbatch` |" in text
    assert "## Not checked" in text and not math.isnan(float(table[0]["largest_deviation"]))
