"""``python -m balagg curve``: one cell's evaluation summaries (one per checkpoint) as one table.

Writes ``eval/curve.csv`` (docs/files.md): columns step, benchmark, acc@8, best@8, best@8_bootstrap,
n_problems, n_samples, truncation_rate; ``benchmark = mean`` rows hold the mean over the benchmarks.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path

def curve_rows(summary_paths: list[Path]) -> list[dict]:
    """Rows of the curve, sorted by step then benchmark (mean last); refuses duplicate steps."""
    from balagg.evaluation.metrics import summary_rows

    rows, seen_steps = [], {}
    for path in summary_paths:
        summary = json.loads(Path(path).read_text())
        try:
            if "mean" not in summary:
                raise KeyError("mean")
            step_rows = summary_rows(summary)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ValueError(f"{path}: not an evaluation summary (missing or bad {error})") from None
        step = step_rows[0]["step"]
        if step in seen_steps:
            raise ValueError(f"step {step} appears twice: {seen_steps[step]} and {path}")
        seen_steps[step] = path
        rows.extend(step_rows)
    rows.sort(key=lambda row: (row["step"], row["benchmark"] == "mean", row["benchmark"]))
    return rows


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("curve", help="collect one cell's per-checkpoint summaries into eval/curve.csv",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("summaries", nargs="+", type=Path, help="summary.json files, one per checkpoint step")
    parser.add_argument("--out", type=Path, required=True, help="curve.csv to write")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from balagg.evaluation.metrics import SUMMARY_COLUMNS
    from balagg.io import atomic_write_text

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=SUMMARY_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(curve_rows(args.summaries))
    atomic_write_text(args.out, buffer.getvalue())
    print(f"wrote {args.out} ({len(args.summaries)} checkpoints)")
    return 0
