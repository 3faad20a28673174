"""Table 1: peak and last-step Acc@8 / Best@8 / Best@8 (bootstrap) per dataset x model x aggregator.

    python analysis/table1.py --campaign-dir results/X --out results/X/analysis  (--help: all options)

Parses the arguments, calls :mod:`balagg.analysis.table1` (where the computation and its
contract live) and writes the files.
"""

from __future__ import annotations

import sys
from pathlib import Path

from balagg.analysis import table1
from balagg.analysis.outputs import base_parser, main_wrapper, results_from_args, write_text
from balagg.analysis.results import discover_cells


def main() -> int:
    parser = base_parser(table1.__doc__)
    parser.add_argument("--paper-values", type=Path, default=None,
                        help="CSV of published values to compare with (the paper campaign: analysis/paper_values.csv)")
    parser.add_argument("--checkpoints", nargs="+", type=Path, default=[], metavar="CHECKPOINT_JSON",
                        help="external checkpoints' checkpoint.json (their eval/curve.csv beside): a row each")
    parser.add_argument("--data-reports", nargs="+", type=Path, default=[], metavar="REPORT_JSON",
                        help="prepare-data reports: benchmark files that lost rows are named in the notes")
    args = parser.parse_args()
    if args.checkpoints and args.cells is None and not discover_cells(args.campaign_dir):  # checkpoints only
        results, args.out = None, args.out or args.campaign_dir / "analysis"
        args.out.mkdir(parents=True, exist_ok=True)
    else:
        results = results_from_args(args)
    paper = table1.load_paper_values(args.paper_values) if args.paper_values else None
    table = table1.build_table(results, paper, args.checkpoints)
    write_text(args.out / "table1.csv", table.to_csv(index=False))
    comparison = table1.compare_with_paper(table, paper) if paper is not None else None
    name = args.campaign_dir.name
    file_notes = table1.benchmark_file_notes(args.data_reports)
    write_text(args.out / "table1.md", table1.to_markdown(table, name, comparison, file_notes))
    write_text(args.out / "table1.tex", table1.to_latex(table, name, file_notes))
    if comparison is not None:
        write_text(args.out / "table1_vs_paper.csv", comparison.to_csv(index=False))
        absent = comparison[~comparison.in_campaign]
        if len(absent):
            print(f"{len(absent)} of {len(comparison)} paper value(s) match no cell of the campaign, e.g. "
                  + ", ".join(absent[["dataset", "model", "aggregator"]].drop_duplicates().head(3)
                              .agg("/".join, axis=1)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main_wrapper(main))
