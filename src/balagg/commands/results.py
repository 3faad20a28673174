"""``python -m balagg results``: what a finished campaign gives a person to look at.

Prints Table 1 (the markdown the workflow wrote), the paths of Figures 1-3, the diagnosis and the HTML
report, and the command that opens MLflow on the campaign's runs table. ``make demo`` ends on it.
Reads only files: results/{campaign}/analysis/, results/{campaign}/report.html and the experiment
record of the mlflow_setup rule (results/{campaign}/mlflow/experiment.json).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("results", help="print Table 1, the figures' and report's paths and the MLflow command",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--campaign-dir", type=Path, required=True, help="results/{campaign}")
    parser.set_defaults(func=run)


def mlflow_command(experiment_record: dict) -> str:
    """The shell command that opens the campaign's experiment in MLflow's UI, on its runs table
    (``#/experiments/<id>/runs``: MLflow 3 opens ``#/experiments/<id>`` on the GenAI traces overview), in
    the saved view the set-up wrote (``?viewStateShareKey=``: the cells' aggregator and headline metrics
    as columns, balagg.tracking.RUNS_VIEW_ID)."""
    uri, experiment_id = experiment_record.get("tracking_uri", ""), experiment_record.get("experiment_id")
    page = f"#/experiments/{experiment_id}/runs" if experiment_id is not None else ""
    if page and experiment_record.get("view"):
        page += f"?viewStateShareKey={experiment_record['view']}"
    if uri.startswith(("http://", "https://")):
        return f"open {uri.rstrip('/')}/{page}"
    executable = Path(sys.executable).with_name("mlflow")
    mlflow = str(executable) if executable.is_file() else "mlflow"
    return f"{shlex.quote(mlflow)} ui --backend-store-uri {shlex.quote(uri)}   # then open http://127.0.0.1:5000/{page}"


def evaluation_only(analysis: Path) -> bool:
    """Whether Table 1 holds external checkpoints only (``table1.csv``): a campaign that trains nothing,
    so Figures 1-3 and the diagnosis, which compare trained cells, do not apply."""
    import csv

    from balagg.external_checkpoints import CHECKPOINT_DATASET

    try:
        with (analysis / "table1.csv").open(newline="") as handle:
            datasets = [row.get("dataset") for row in csv.DictReader(handle)]
    except OSError:
        return False
    return bool(datasets) and all(dataset == CHECKPOINT_DATASET for dataset in datasets)


def results_text(campaign_dir: Path) -> str:
    analysis = campaign_dir / "analysis"
    table = analysis / "table1.md"
    if not table.is_file():
        raise ValueError(f"{table} not found: the campaign's analysis has not run (snakemake first)")
    lines = [f"Table 1 ({table}):", "", table.read_text().rstrip(), ""]
    grid_only = [*((f"Figure {n}", analysis / f"figure{n}.png") for n in (1, 2, 3)), ("Diagnosis", analysis / "diagnosis.md")]
    if evaluation_only(analysis):
        lines.append(f"{'Figures:':<11} not applicable: an evaluation-only campaign (Figures 1-3 and the diagnosis "
                     "compare aggregators over training)")
        grid_only = []
    for label, path in [*grid_only, ("Report", campaign_dir / "report.html")]:
        lines.append(f"{label + ':':<11} {path}" + ("" if path.is_file() else "   (missing)"))
    record_path = campaign_dir / "mlflow" / "experiment.json"
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    if record.get("status") == "ok":
        lines.append(f"{'MLflow:':<11} {mlflow_command(record)}")
    else:
        lines.append(f"{'MLflow:':<11} not set up ({record_path}: {record.get('reason', 'missing')})")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    print(results_text(args.campaign_dir))
    return 0
