"""``python -m balagg track``: MLflow alongside the workflow (files stay the source of truth).

    track setup    --tracking-uri URI --experiment NAME [--artifact-location DIR] --out experiment.json
    track eval     --manifest manifest.json --curve eval/curve.csv [--benchmark-data FILE...] [--fetch fetch.json]
                   --out eval/mlflow.json
    track analysis --tracking-uri URI --experiment NAME --out analysis/mlflow.json FILE...

Each writes a small JSON status (``ok``, ``skipped`` when the server is unreachable, ``failed``) and exits
0 either way: an MLflow outage is a warning, never a reason to stop the pipeline.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("track", help="MLflow: create the experiment, log eval curves and analysis",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    setup = actions.add_parser("setup", help="create the tracking store and the campaign's experiment")
    setup.add_argument("--tracking-uri", required=True)
    setup.add_argument("--experiment", required=True)
    setup.add_argument("--artifact-location", default=None,
                       help="folder for the experiment's artifacts (default: the store's, ./mlruns for SQLite)")
    setup.add_argument("--out", type=Path, required=True)
    evaluation = actions.add_parser("eval", help="log a cell's eval curve into its training run")
    evaluation.add_argument("--manifest", type=Path, required=True, help="the cell's manifest.json")
    evaluation.add_argument("--curve", type=Path, required=True, help="the cell's eval/curve.csv")
    evaluation.add_argument("--tracking-uri", default=None, help="default: the manifest's")
    evaluation.add_argument("--benchmark-data", nargs="*", type=Path, default=[],
                            help="the cell's prepared benchmark files, logged as its evaluation datasets (its "
                                 "training sets, the manifest's train_files, as its training datasets)")
    evaluation.add_argument("--fetch", type=Path, default=None,
                            help="the campaign's fetch.json: the revisions of its hub datasets")
    evaluation.add_argument("--out", type=Path, required=True)
    analysis = actions.add_parser("analysis", help="log Table 1, the figures and the diagnosis as artifacts")
    analysis.add_argument("--tracking-uri", required=True)
    analysis.add_argument("--experiment", required=True)
    analysis.add_argument("--out", type=Path, required=True)
    analysis.add_argument("files", nargs="+", type=Path)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from balagg import tracking
    from balagg.io import write_json

    if args.action == "setup":
        status = tracking.setup_experiment(args.tracking_uri, args.experiment, args.artifact_location)
    elif args.action == "eval":
        manifest = json.loads(args.manifest.read_text())
        with args.curve.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        uri = args.tracking_uri or manifest.get("mlflow_tracking_uri") or manifest["config"].get("mlflow_tracking_uri")
        fetch = json.loads(args.fetch.read_text()) if args.fetch else None
        inputs = tracking.dataset_inputs(manifest["config"].get("train_files", []), args.benchmark_data, fetch)
        status = tracking.log_eval_curve(uri, manifest, rows, inputs) if uri else {"status": "skipped", "reason": "no URI"}
    else:
        missing = [str(path) for path in args.files if not path.exists()]
        if missing:
            raise ValueError(f"no such files: {', '.join(missing)}")
        status = tracking.log_analysis(args.tracking_uri, args.experiment, [str(path) for path in args.files])
    write_json(args.out, status)
    print(json.dumps(status))
    return 0
