"""Point-7 failures as one line naming the file and the cause: a full disk in prepare-data, score,
generate and train, a truncated weights file, a torn JSONL line, a misspelled config key."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest

import balagg.io
from balagg.cli import main
from balagg.errors import check_safetensors, checkpoint_write_error, os_error_line


class FullDisk:
    """open() whose files accept no byte: write() fails with ENOSPC, as on a full disk."""

    def __init__(self, real_open):
        self.real_open = real_open

    def __call__(self, file, mode="r", *args, **kwargs):
        handle = self.real_open(file, mode, *args, **kwargs)
        if "w" in mode or "a" in mode:
            def write(data):
                raise OSError(errno.ENOSPC, "No space left on device")
            handle.write = write
        return handle


@pytest.fixture
def full_disk(monkeypatch):
    monkeypatch.setattr(balagg.io, "open", FullDisk(open), raising=False)


def test_full_disk_in_prepare_data_is_one_line_naming_the_output(tmp_path, full_disk, capsys):
    from test_data import MATH500_ROWS, write_jsonl_rows

    write_jsonl_rows(tmp_path / "mirror" / "test.jsonl", MATH500_ROWS)
    out = tmp_path / "bench" / "math500.jsonl"
    assert main(["prepare-data", "--benchmark", "math500", "--source", str(tmp_path / "mirror"),
                 "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after datasets' progress lines
    assert err == f"error: {out}: no space left on device (No space left on device); free space and rerun"
    assert not out.exists() and not list(out.parent.glob(".*tmp*"))


def test_full_disk_in_score_names_the_file(tmp_path, full_disk, capsys):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "math500.jsonl").write_text(json.dumps(
        {"id": "p0", "benchmark": "math500", "kind": "math", "problem": "1+1", "answer": "2"}) + "\n")
    generations = tmp_path / "gen" / "generations.jsonl"
    generations.parent.mkdir()
    generations.write_text("".join(json.dumps({"benchmark": "math500", "problem_id": "p0", "sample": i,
                                               "text": "\\boxed{2}", "finish_reason": "stop",
                                               "completion_tokens": 3}) + "\n" for i in range(8)))
    assert main(["score", "--generations", str(generations), "--benchmarks-dir", str(bench), "--step", "0",
                 "--workers", "1", "--out", str(tmp_path / "gen")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no space left on device" in err and str(tmp_path / "gen") in err


def test_a_torn_jsonl_line_is_named_with_file_and_line(tmp_path, capsys):
    generations = tmp_path / "generations.jsonl"
    whole = json.dumps({"benchmark": "math500", "problem_id": "p0", "sample": 0, "text": "2", "finish_reason": "stop"})
    generations.write_text(whole + "\n" + whole[:20])  # the writer was killed in the middle of line 2
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "math500.jsonl").write_text(json.dumps(
        {"id": "p0", "benchmark": "math500", "kind": "math", "problem": "1+1", "answer": "2"}) + "\n")
    assert main(["score", "--generations", str(generations), "--benchmarks-dir", str(tmp_path / "bench"),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {generations}:2: not valid JSON") and err.count("\n") == 1


def test_a_failed_checkpoint_save_reads_as_a_full_disk_naming_the_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10 << 30, 10 << 30, 1024))
    torch_error = RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 1856 vs 1744")
    named = checkpoint_write_error(torch_error, tmp_path / "train")
    assert os_error_line(named).startswith(f"{tmp_path / 'train'}: no space left on device")
    safetensors_error = Exception("Error while serializing: IoError(Os { code: 28, kind: StorageFull })")
    assert checkpoint_write_error(safetensors_error, tmp_path).errno == errno.ENOSPC
    assert checkpoint_write_error(ValueError("bad row"), tmp_path) is None


def test_full_disk_appending_a_metrics_line_names_metrics_jsonl(tmp_path, monkeypatch):
    import balagg.train.files as files

    monkeypatch.setattr(files, "open", FullDisk(open), raising=False)
    with pytest.raises(OSError) as caught:
        files.append_metrics(tmp_path / "metrics.jsonl", {"step": 1})
    assert os_error_line(caught.value).startswith(f"{tmp_path / 'metrics.jsonl'}: no space left on device")


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    pytest.importorskip("transformers")
    from tiny_checkpoint import build_checkpoint

    return build_checkpoint(tmp_path_factory.mktemp("ckpt") / "step-000000")


@pytest.mark.parametrize("cut", ["empty", "header", "data"])
def test_truncated_or_empty_weights_are_named_before_loading(weights, tmp_path, cut, capsys):
    broken = shutil.copytree(weights, tmp_path / "broken")
    path = broken / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes({"empty": b"", "header": data[:20], "data": data[: len(data) // 2]}[cut])
    with pytest.raises(ValueError, match=rf"^{path}: (empty|truncated) weights file"):
        check_safetensors(broken)
    check_safetensors(weights)  # the complete one passes
    (tmp_path / "bench").mkdir()
    assert main(["generate", "--checkpoint", str(broken), "--benchmarks-dir", str(tmp_path / "bench"),
                 "--benchmarks", "math500", "--out", str(tmp_path / "gen")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: ") and err.count("\n") == 1


@pytest.mark.parametrize("key", ["learnin_rate", "beta"])  # beta: there is no KL term to set
def test_a_misspelled_config_key_is_one_line_without_the_schema(tmp_path, key):
    from checkout import copy_workflow
    from test_workflow import snakemake

    copy_workflow(tmp_path)
    (tmp_path / "typo.yaml").write_text(f"train:\n  {key}: 0.1\n")
    result = snakemake("-n", "--configfile", "configs/smoke.yaml", "typo.yaml", cwd=tmp_path, check=False)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    message = [line for line in output.splitlines() if key in line]
    # the one file that has the key (not every file of the run), the key's whole path
    assert len(message) == 1 and message[0].startswith(f"config {tmp_path}/typo.yaml: train.{key}: unknown key")
    assert "smoke.yaml" not in message[0]
    assert "additionalProperties" not in output and len(output.splitlines()) < 10


def test_skipped_bad_rows_reach_the_report_the_data_card_and_the_end_of_run_line(tmp_path, capsys):
    from test_data import write_jsonl_rows

    from balagg.tinyworld.warmstart import merge_cards

    rows = [{"id": 1, "question": "q", "final_answer": "2"}, {"id": 2, "question": "r", "final_answer": ["3"]}]
    source = write_jsonl_rows(tmp_path / "ob.jsonl", rows)
    out, report = tmp_path / "bench" / "olympiadbench.jsonl", tmp_path / "bench" / "olympiadbench.report.json"
    assert main(["prepare-data", "--benchmark", "olympiadbench", "--source", str(source), "--on-bad-row", "skip",
                 "--out", str(out), "--report", str(report)]) == 0
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"{out}: skipped 1 bad row(s) of 2 (on_bad_row skip), e.g. olympiadbench-0000")
    saved = json.loads(report.read_text())
    assert saved["skipped"] == 1 and saved["written"] == 1
    card = {"model": "tiny-s", "datasets": {"d": {"accuracy": 0.3, "len_cv": 0.4, "len_right_mean": 1.0,
                                                  "len_wrong_mean": 2.0, "in_regime": True, "wrong_longer": True}}}
    (tmp_path / "card.json").write_text(json.dumps(card))
    merged = merge_cards([tmp_path / "card.json"], tmp_path / "data-card.json", [report])
    assert merged["bad_rows"] == {str(out): {"skipped": 1, "rows_read": 2, "examples": saved["bad_rows"]}}


def test_a_yaml_syntax_error_in_a_config_is_one_line_with_file_line_and_column(tmp_path, capsys):
    """Snakemake 9.27 reads --configfile before any workflow code and drops the parser's position;
    `python -m balagg plan --configfile` (the same files, merged the same way) names it."""
    from balagg.cli import main

    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("campaign: x\n")
    bad.write_text("train:\n  learning_rate: 0.1\n  total_steps: [4\n")
    assert main(["plan", "--configfile", str(good), str(bad)]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {bad}:4:1: not valid YAML ("), err
    (tmp_path / "list.yaml").write_text("- 1\n")
    assert main(["plan", "--configfile", str(tmp_path / "list.yaml")]) != 0
    assert "must hold a mapping" in capsys.readouterr().err
