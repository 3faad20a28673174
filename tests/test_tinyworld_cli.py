"""``python -m balagg tinyworld data|model`` end to end (a short warm start: files and card contents)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def run_cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    return subprocess.run([sys.executable, "-m", "balagg", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_data_command_writes_manifest_and_is_deterministic(tmp_path):
    for folder in ("a", "b"):
        result = run_cli("tinyworld", "data", "--out", str(tmp_path / folder), "--seed", "3",
                         "--train-problems", "40", "--bench-problems", "5")
        assert result.returncode == 0, result.stderr
        assert "dapo-math-17k 40" in result.stdout and "livecodebench 5" in result.stdout
    a = json.loads((tmp_path / "a" / "manifest.json").read_text())
    b = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert a == b and a["seed"] == 3 and len(a["datasets"]) == 8


def test_model_command_rejects_bad_input_with_one_line(tmp_path):
    result = run_cli("tinyworld", "model", "--size", "huge", "--raw", str(tmp_path), "--out", str(tmp_path / "m"))
    assert result.returncode == 2 and "unknown tiny model size 'huge'" in result.stderr
    result = run_cli("tinyworld", "model", "--size", "tiny-s", "--raw", str(tmp_path), "--out", str(tmp_path / "m"))
    assert result.returncode == 2 and "no manifest.json" in result.stderr


@pytest.mark.slow
def test_model_command_saves_a_loadable_model_and_its_card(tmp_path):
    raw = tmp_path / "raw"
    assert run_cli("tinyworld", "data", "--out", str(raw), "--train-problems", "20", "--bench-problems", "2").returncode == 0
    out = tmp_path / "models" / "tiny-s"
    result = run_cli("tinyworld", "model", "--size", "tiny-s", "--raw", str(raw), "--out", str(out),
                     "--sft-steps", "30", "--card-problems", "4", "--card-samples", "2", "--max-new-tokens", "24")
    assert result.returncode == 0, result.stderr
    assert "tinyworld tiny-s step 0: dapo-math-17k acc" in result.stdout
    card = json.loads((out / "card.json").read_text())
    assert card["model"] == "tiny-s" and card["warm_start"]["steps"] == 30
    assert card["warm_start"]["loss_last"] < card["warm_start"]["loss_first"]  # it learned something
    assert set(card["datasets"]) == {"dapo-math-17k", "polaris-53k"}
    for stats in card["datasets"].values():
        assert stats["n_samples"] == 8 and 0.0 <= stats["accuracy"] <= 1.0 and stats["len_mean"] > 0
    assert card["prompt_template"] == "{problem}"

    import torch
    from balagg.tinyworld.model import load_checkpoint

    model, tokenizer = load_checkpoint(out)
    assert sum(p.numel() for p in model.parameters()) == card["parameters"]
    assert torch.isfinite(model(torch.tensor([tokenizer.encode("Compute 1+2.")])).logits).all()


def test_walk_world_and_its_regime_through_the_commands(tmp_path):
    """The walks family as the workflow runs it (configs/laboratory.yaml's wrong-long-walk): data, then a model
    warm-started on walks whose card samples the walk training problems through the real loaders."""
    raw = tmp_path / "raw"
    result = run_cli("tinyworld", "data", "--out", str(raw), "--family", "walks", "--train-problems", "83",
                     "--bench-problems", "16")
    assert result.returncode == 0, result.stderr
    assert "(walks, seed 0)" in result.stdout and "dapo-math-17k 83" in result.stdout
    out = tmp_path / "models" / "walk"
    result = run_cli("tinyworld", "model", "--size", "tiny-xs", "--raw", str(raw), "--out", str(out),
                     "--regime", "wrong-long-walk", "--sft-steps", "20", "--sft-length-buckets", "2",
                     "--card-problems", "4", "--card-samples", "2", "--max-new-tokens", "24", "--answer-format",
                     "boxed-strict")
    assert result.returncode == 0, result.stderr
    card = json.loads((out / "card.json").read_text())
    assert card["length_regime"] == "wrong-long-walk" and card["warm_start"]["length_buckets"] == 2
    assert card["datasets"]["dapo-math-17k"]["n_samples"] == 8
    result = run_cli("tinyworld", "model", "--size", "tiny-xs", "--raw", str(raw), "--out", str(tmp_path / "chain"),
                     "--sft-steps", "20")
    assert result.returncode == 2 and "the tiny world's family is 'walks'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_card_command_merges_model_cards(tmp_path):
    def stats(acc, cv, right, wrong):
        return {"accuracy": acc, "len_cv": cv, "len_right_mean": right, "len_wrong_mean": wrong,
                "in_regime": 0.2 <= acc <= 0.8 and cv >= 0.3, "wrong_longer": wrong > right}

    cards = []
    for model, polaris_cv in (("tiny-s", 0.31), ("tiny-m", 0.25)):
        card = {"model": model, "regime": {"met": True},
                "datasets": {"dapo-math-17k": stats(0.3, 0.35, 29.0, 37.0), "polaris-53k": stats(0.4, polaris_cv, 30, 30)}}
        path = tmp_path / model / "card.json"
        path.parent.mkdir()
        path.write_text(json.dumps(card))
        cards.append(str(path))
    out = tmp_path / "data" / "card.json"
    result = run_cli("tinyworld", "card", "--cards", *cards, "--out", str(out))
    assert result.returncode == 0, result.stderr
    merged = json.loads(out.read_text())
    assert set(merged["models"]) == {"tiny-s", "tiny-m"} and len(merged["table"]) == 4
    assert merged["regime_met"] is False  # tiny-m x polaris has length CV 0.25
    assert "tinyworld tiny-s step 0: dapo-math-17k acc 0.300" in result.stdout
    assert "regime met over the grid: False" in result.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    result = run_cli("tinyworld", "card", "--cards", str(bad), "--out", str(out))
    assert result.returncode == 2 and "not a tiny-world model card" in result.stderr
