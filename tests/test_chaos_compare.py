"""The chaos test's comparison (tests/chaos.py) ignores only wall-clock fields, ids and folder names."""

from __future__ import annotations

import json

from chaos import compare_trees


def _tree(root, seconds, value, run_id):
    results = root / "results" / "smoke"
    cell = results / "m" / "d" / "seq-agg" / "seed0"
    (cell / "train").mkdir(parents=True)
    (cell / "logs").mkdir()
    (cell / "manifest.json").write_text(json.dumps({
        "steps": 4, "mlflow_run_id": run_id, "metrics_file": f"{root.resolve()}/results/smoke/m/metrics.jsonl",
        "final_metrics": {"step": 4, "pg_loss": value, "step_seconds": seconds}}))
    (cell / "train" / "metrics.jsonl").write_text(json.dumps({"step": 1, "tokens_per_s": 1 / seconds,
                                                              "pg_loss": value}) + "\n")
    (cell / "logs" / "train.log").write_text(f"took {seconds} s\n")  # logs are not compared
    (results / "figure.pdf").write_bytes(b"%PDF /CreationDate (D:2026" + str(seconds).encode() + b") body")
    return results


def test_wall_clock_fields_ids_and_folders_do_not_count_but_a_value_does(tmp_path):
    reference = _tree(tmp_path / "a", 1.5, 0.25, "0" * 32)
    assert compare_trees(reference, _tree(tmp_path / "b", 9.0, 0.25, "f" * 32)) == {
        "compared": 3, "only_reference": [], "only_chaos": [], "differing": []}
    other = compare_trees(reference, _tree(tmp_path / "c", 1.5, 0.5, "0" * 32))
    assert other["differing"] == ["m/d/seq-agg/seed0/manifest.json", "m/d/seq-agg/seed0/train/metrics.jsonl"]
    (tmp_path / "c" / "results" / "smoke" / "extra.csv").write_text("x\n")
    assert compare_trees(reference, tmp_path / "c" / "results" / "smoke")["only_chaos"] == ["extra.csv"]
