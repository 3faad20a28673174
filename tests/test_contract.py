"""What the stages share (balagg.layout, balagg.benchmarks, balagg.prompts, balagg.settings) is one value,
and every stage reads that value."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from balagg import benchmarks, settings
from balagg.cli import build_parser, main
from balagg.layout import (
    SUMMARY_FILE,
    TINYWORLD_DEFAULT_FAMILY,
    TINYWORLD_FAMILIES,
    cell_relpath,
    checkpoint_relpath,
    data_file,
    data_report_file,
    eval_step_relpath,
    parse_step_dirname,
    step_dirname,
    step_of_path,
    tinyworld_raw_dir,
)
from balagg.prompts import ANSWER_FORMATS, DEFAULT_ANSWER_FORMAT, check_template, render_prompt

REPO = Path(__file__).resolve().parents[1]


def subcommand(*names: str) -> argparse.ArgumentParser:
    """The parser of ``python -m balagg NAME [ACTION]``."""
    parser = build_parser()
    for name in names:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def defaults_of(parser: argparse.ArgumentParser) -> dict:
    return {action.dest: action.default for action in parser._actions if action.dest != "help"}


# ---- one default (balagg.settings), read by the dataclasses and every hand-written command line -------

def test_the_default_familys_files_keep_their_paths_and_another_family_has_its_own_folder():
    assert data_file("bench", "math500") == data_file("bench", "math500", "chains") == (
        "data/bench/math500.jsonl")
    assert data_file("train", "arith", "walks") == "data/walks/train/arith.jsonl"
    assert data_report_file("bench", "minerva", "walks") == "data/walks/bench/minerva.report.json"
    assert tinyworld_raw_dir() == tinyworld_raw_dir("chains") == "tinyworld/raw"
    assert tinyworld_raw_dir("walks") == "tinyworld/walks/raw"
    assert data_file("{kind}", "{name}", "{family}") == "data/{family}/{kind}/{name}.jsonl"  # a rule's pattern
    with pytest.raises(ValueError, match="unknown tiny-world family 'graphs'"):
        data_file("bench", "math500", "graphs")
    from balagg.tinyworld.regimes import REGIMES
    from balagg.tinyworld.walks import WORLDS

    assert {r.family for r in REGIMES.values()} == set(TINYWORLD_FAMILIES)
    assert set(WORLDS) == set(TINYWORLD_FAMILIES) - {TINYWORLD_DEFAULT_FAMILY}  # a world per walk family


def test_the_verifier_setting_names_a_function():
    module, _, function = settings.VERIFIER.verifier.partition(":")
    assert callable(getattr(__import__(module, fromlist=[function]), function))


def test_one_answer_format_list_and_one_default_everywhere():
    from balagg.campaign import campaign_schema
    from balagg.evaluation.generation.requests import GenerationConfig
    from balagg.train.config import CellConfig

    schema = campaign_schema()["properties"]
    for section in ("models", "checkpoints"):
        assert tuple(schema[section]["additionalProperties"]["properties"]["answer_format"]["enum"]) == ANSWER_FORMATS
    assert DEFAULT_ANSWER_FORMAT in ANSWER_FORMATS
    cell = {f.name: f.default for f in dataclasses.fields(CellConfig)}
    flags = defaults_of(subcommand("tinyworld", "model"))
    assert cell["answer_format"] == GenerationConfig().answer_format == flags["answer_format"] == (
        DEFAULT_ANSWER_FORMAT)


def test_one_name_and_one_default_for_the_chat_template():
    """A model's ``chat_template`` reaches its cell config and its generate jobs under the same name, with the
    same default when the model does not say."""
    from balagg.campaign import campaign_schema
    from balagg.evaluation.generation.requests import GenerationConfig
    from balagg.prompts import DEFAULT_CHAT_TEMPLATE
    from balagg.train.config import CellConfig

    schema = campaign_schema()["properties"]
    defaults = {schema[section]["additionalProperties"]["properties"]["chat_template"]["default"]
                for section in ("models", "checkpoints")}
    defaults |= {CellConfig.__dataclass_fields__["chat_template"].default, GenerationConfig().chat_template,
                 defaults_of(subcommand("generate"))["chat_template"]}
    assert defaults == {DEFAULT_CHAT_TEMPLATE}


def test_tinyworld_and_prepare_data_defaults_are_the_workflows():
    data, model = defaults_of(subcommand("tinyworld", "data")), defaults_of(subcommand("tinyworld", "model"))
    assert (data["seed"], data["train_problems"], data["bench_problems"], data["family"]) == (
        settings.TINYWORLD.seed, settings.TINYWORLD.train_problems, settings.TINYWORLD.bench_problems,
        TINYWORLD_DEFAULT_FAMILY)
    assert (model["seed"], model["sft_steps"], model["sft_length_buckets"]) == (
        settings.TINYWORLD.seed, settings.TINYWORLD.sft_steps, settings.TINYWORLD.sft_length_buckets)
    assert defaults_of(subcommand("prepare-data"))["on_bad_row"] == settings.DATA.on_bad_row


@pytest.mark.parametrize("script", ["figure2", "figure3"])
def test_figure_scripts_smooth_by_the_workflows_default(script):
    help_text = subprocess.run([sys.executable, str(REPO / "analysis" / f"{script}.py"), "--help"],
                               capture_output=True, text=True, timeout=120, check=True).stdout
    assert f"default {settings.ANALYSIS.smoothing}" in " ".join(help_text.split())


# ---- a model's train overrides are typed like the train section ---------------------------------------

def campaign(**model_train) -> dict:
    return {"campaign": "c", "aggregators": ["seq-agg"], "benchmarks": {"math500": "tinyworld"},
            "datasets": {"d": {"loader": "dapo-math-17k", "source": "tinyworld"}},
            "models": {"m": {"path": "tinyworld", "tinyworld_size": "tiny-s", "train": model_train}},
            "train": {"total_steps": 4, "eval_every": 2}}


def validate(config: dict) -> None:
    from balagg.campaign import resolve

    resolve(config)


@pytest.mark.parametrize("override", [{"aggregator": "token-agg"}, {"seed": 3}, {"dataset_name": "x"},
                                      {"learning_rate": "fast"}, {"total_stpes": 8}])
def test_a_models_train_overrides_are_typed_and_cannot_rename_the_cell(override):
    with pytest.raises(ValueError, match=f"models.m.train.{next(iter(override))}"):
        validate(campaign(**override))


def test_a_model_may_override_part_of_the_train_section():
    validate(campaign(total_steps=8, learning_rate=1e-5))
    config = campaign()
    del config["train"]["eval_every"]
    with pytest.raises(ValueError, match="train.eval_every: a grid"):
        validate(config)
    validate(campaign(eval_every=2) | {"train": {"total_steps": 4}})  # the model's own eval_every completes it


# ---- layout -----------------------------------------------------------------------------------------------

def test_step_folders_round_trip_and_the_trainer_writes_them(tmp_path):
    from balagg.train.files import CellDir

    assert step_dirname(40) == "step-000040"
    assert parse_step_dirname("step-000040", strict=True) == 40
    assert parse_step_dirname("step-40") == 40 and parse_step_dirname("step-40", strict=True) is None
    assert parse_step_dirname("checkpoint-40") is None
    cell = CellDir(tmp_path)
    cell.checkpoint(7).mkdir(parents=True)
    (cell.checkpoints / "step-7").mkdir()  # not written by the trainer: ignored
    assert cell.eval_checkpoints() == [(7, cell.checkpoint(7))]
    assert step_of_path(tmp_path / "x" / eval_step_relpath(12)) == 12
    assert eval_step_relpath("{step}", SUMMARY_FILE) == "eval/step-{step}/summary.json"
    assert checkpoint_relpath(0) == "train/checkpoints/step-000000"


def test_benchmark_order_is_the_papers():
    assert benchmarks.benchmark_order(["minerva", "zeta", "math500", "mean", "alpha"]) == (
        "math500", "minerva", "alpha", "zeta")
    from balagg.tinyworld.raw import LAYOUT

    assert set(LAYOUT) == set(benchmarks.BENCHMARKS) | set(benchmarks.TRAINING_SETS)


# ---- metric names follow n ---------------------------------------------------------------------------------

def summary(step: int, n: int, value: float) -> dict:
    acc, best, best_bootstrap = benchmarks.eval_metrics(n)
    values = {acc: value, best: value, best_bootstrap: value / 2}
    entry = {**values, "n_problems": 1, "n_samples": n, "truncation_rate": 0.0}
    return {"step": step, "n": n, "benchmarks": {"math500": entry}, "mean": values}


def test_a_curve_of_n_samples_has_filled_acc_at_n_columns(tmp_path):
    paths = []
    for step in (0, 2):
        path = tmp_path / f"{step}.json"
        path.write_text(json.dumps(summary(step, 4, 0.25 * (step + 1))))
        paths.append(str(path))
    assert main(["curve", "--out", str(tmp_path / "curve.csv"), *paths]) == 0
    rows = list(csv.DictReader((tmp_path / "curve.csv").open()))
    assert list(rows[0]) == list(benchmarks.summary_columns(4))
    assert [row["acc@4"] for row in rows] == ["0.25", "0.25", "0.75", "0.75"]

    from balagg.tracking import eval_metrics

    assert eval_metrics(rows)[2] == {
        f"eval/{benchmark}/{metric}": value for benchmark in ("math500", "mean")
        for metric, value in (("acc_at_4", 0.75), ("best_at_4", 0.75), ("best_at_4_bootstrap", 0.375))}


def test_a_curve_refuses_summaries_of_different_n(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(summary(0, 4, 0.5)))
    b.write_text(json.dumps(summary(2, 8, 0.5)))
    assert main(["curve", "--out", str(tmp_path / "curve.csv"), str(a), str(b)]) == 2
    assert "n=4" in capsys.readouterr().err


def test_the_analysis_names_a_curve_of_another_n(tmp_path):
    from balagg.analysis import load_results

    cell = tmp_path / "camp" / cell_relpath("m", "d", "seq-agg", 0)
    (cell / "eval").mkdir(parents=True)
    rows = [{"step": 0, "benchmark": b, "acc@4": 0.5, "best@4": 0.5} for b in ("math500", "mean")]
    with (cell / "eval" / "curve.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    problems = [p for p in load_results(tmp_path / "camp").problems if p.kind == "bad-file"]
    assert problems and "n=4" in problems[0].message and "acc@8" in problems[0].message


# ---- one prompt rendering -----------------------------------------------------------------------------------

def test_render_prompt_keeps_braces_and_substitutes_once():
    template = "Q: {problem}\n\\boxed{} {other} {code_instructions}"
    assert render_prompt(template, problem="{code_instructions} x^{2}", code_instructions="C") == (
        "Q: {code_instructions} x^{2}\n\\boxed{} {other} C")
    with pytest.raises(ValueError, match="prompt must contain the placeholder"):
        check_template("no placeholder", ("problem",), "prompt")


def test_training_and_evaluation_render_a_braced_template_alike(tmp_path):
    pytest.importorskip("datasets")
    from balagg.evaluation.generation.generate import user_message
    from balagg.evaluation.generation.requests import GenerationConfig
    from balagg.tinyworld.model import build_tokenizer
    from balagg.train.config import CellConfig
    from balagg.train.data import build_prompts

    template = "{problem} Put it in \\boxed{}; {braces} stay."
    problem = "Compute {1+2}."
    (tmp_path / "t.jsonl").write_text(json.dumps({"id": "a", "problem": problem, "answer": "3"}) + "\n")
    cell = CellConfig(model="m", train_files=[str(tmp_path / "t.jsonl")], aggregator="seq-agg", seed=0,
                      prompt_template=template, chat_template=False, prompts_per_step=1, num_generations=2,
                      mini_batches=1, micro_batch_size=2, save_every=1, max_prompt_length=200,
                      max_completion_length=64, overlong_buffer_len=32)
    trained = build_prompts(cell, build_tokenizer())[0]["prompt"]
    evaluated = user_message({"kind": "math", "problem": problem}, GenerationConfig(math_template=template))
    assert trained == evaluated == "Compute {1+2}. Put it in \\boxed{}; {braces} stay."


def test_the_shared_modules_import_nothing_heavy():
    """The workflow and ``--help`` import them."""
    probe = ("import sys, balagg.benchmarks, balagg.layout, balagg.prompts, balagg.settings; heavy = {'torch', 'transformers', 'pandas', 'numpy', 'yaml'} & "
             "set(sys.modules); assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)
