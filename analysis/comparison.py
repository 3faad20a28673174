"""comparison.md / comparison.csv: is each difference between two aggregators larger than its error?

    python analysis/comparison.py --campaign-dir results/X --out results/X/analysis

For every (model, dataset) setting and pair of aggregators, the paired test over (seed, benchmark,
problem) units of balagg.analysis.comparison at the final step and over the mean of trained
checkpoints, with the difference, its standard error, p, the minimum detectable difference and a
verdict. Needs each checkpoint's scores.jsonl; comparisons without them are "not testable".
"""

from __future__ import annotations

from balagg.analysis.comparison import comparison_table, to_markdown
from balagg.analysis.outputs import base_parser, main_wrapper, results_from_args, write_text


def main() -> int:
    args = base_parser(__doc__).parse_args()
    results = results_from_args(args)
    table = comparison_table(results)
    write_text(args.out / "comparison.csv", table.to_csv(index=False))
    write_text(args.out / "comparison.md", to_markdown(table, results.name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main_wrapper(main))
