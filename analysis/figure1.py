"""Figure 1: per benchmark, peak and last-step Acc@8 of each aggregator.

    python analysis/figure1.py --campaign-dir results/X --out results/X/analysis  (--help: all options)

Parses the arguments, calls :mod:`balagg.analysis.figure1` (where the computation and its
contract live) and writes the files.
"""

from __future__ import annotations

from balagg.analysis import figure1
from balagg.analysis.outputs import base_parser, main_wrapper, results_from_args, save_figure


def main() -> int:
    args = base_parser(figure1.__doc__).parse_args()
    results = results_from_args(args)
    save_figure(figure1.make_figure(results), args.out, "figure1")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_wrapper(main))
