"""configs/evaluate.yaml as shipped, run through Snakemake offline from a hub cache of stand-ins (its own
module, so that the test runs beside tests/test_workflow_external_checkpoints.py's campaign under ``make test``'s
workers)."""

from __future__ import annotations

import csv
import math
import subprocess
import sys

import yaml

from checkout import copy_workflow
from test_workflow import job_counts
from test_workflow_external_checkpoints import run_snakemake


def test_the_example_evaluates_the_paper_models_at_their_pinned_commits(tmp_path):
    """configs/evaluate.yaml as shipped, offline, with the hub cache that `balagg tinyworld hub-cache` fills
    from it (tiny stand-ins stored at its pinned commits; the benchmarks in their real schemas) and an
    overlay of evaluation sizes only: no training job, and Table 1 has a row per pinned model, naming the
    commit it was read at."""
    (tmp_path / "work").mkdir()
    work = copy_workflow(tmp_path / "work")
    hf_home = tmp_path / "hf"
    filled = subprocess.run([sys.executable, "-m", "balagg", "tinyworld", "hub-cache", "--hf-home", str(hf_home),
                             "--configfile", "configs/evaluate.yaml"], cwd=work, capture_output=True, text=True,
                            timeout=300)
    assert filled.returncode == 0, filled.stderr[-2000:]
    (work / "sizes.yaml").write_text(yaml.safe_dump({"eval": {"max_tokens": 16, "batch_size": 64}}))
    done = run_snakemake("--cores", "2", "--configfile", "configs/evaluate.yaml", "sizes.yaml", cwd=work,
                         hf_home=hf_home)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert "train" not in job_counts(done.stdout + done.stderr)
    example = yaml.safe_load((work / "configs/evaluate.yaml").read_text())["checkpoints"]
    with (work / "results/evaluate/analysis/table1.csv").open() as handle:
        rows = {row["model"]: row for row in csv.DictReader(handle)}
    assert set(rows) == set(example)
    for name, spec in example.items():
        assert rows[name]["dataset"] == "(checkpoint)" and rows[name]["commit"] == spec["revision"]
        assert math.isfinite(float(rows[name]["last_acc@8"]))
