"""``python -m balagg curve``: one cell's evaluation summaries (one per checkpoint) as one table.

Writes ``eval/curve.csv`` (docs/files.md): columns step, benchmark, acc@n, best@n, best@n_bootstrap,
n_problems, n_samples, truncation_rate, unparsable_golds, with the n the summaries were scored with (8 in
the workflow; every summary needs the same n); ``benchmark = mean`` rows hold the mean over the benchmarks.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path

from balagg.benchmarks import MEAN, summary_columns


def curve_rows(summary_paths: list[Path]) -> tuple[list[dict], int]:
    """Rows of the curve, sorted by step then benchmark (mean last), and the summaries' n; refuses
    duplicate steps and summaries scored with different n."""
    from balagg.evaluation.scoring.metrics import summary_rows, summary_samples

    rows, seen_steps, samples = [], {}, {}
    for path in summary_paths:
        summary = json.loads(Path(path).read_text())
        try:
            if MEAN not in summary:
                raise KeyError(MEAN)
            step_rows = summary_rows(summary)
            samples.setdefault(summary_samples(summary), path)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ValueError(f"{path}: not an evaluation summary (missing or bad {error})") from None
        if len(samples) > 1:
            raise ValueError(f"summaries scored with different numbers of samples: "
                             + ", ".join(f"n={n} ({where})" for n, where in samples.items()))
        step = step_rows[0]["step"]
        if step in seen_steps:
            raise ValueError(f"step {step} appears twice: {seen_steps[step]} and {path}")
        seen_steps[step] = path
        rows.extend(step_rows)
    rows.sort(key=lambda row: (row["step"], row["benchmark"] == MEAN, row["benchmark"]))
    return rows, next(iter(samples))


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("curve", help="collect one cell's per-checkpoint summaries into eval/curve.csv",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("summaries", nargs="+", type=Path, help="summary.json files, one per checkpoint step")
    parser.add_argument("--out", type=Path, required=True, help="curve.csv to write")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from balagg.io import atomic_write_text

    rows, n = curve_rows(args.summaries)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=summary_columns(n), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(args.out, buffer.getvalue())
    print(f"wrote {args.out} ({len(args.summaries)} checkpoints)")
    return 0
