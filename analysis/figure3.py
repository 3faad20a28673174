"""Figure 3: response-length CV and positive-negative length gap over training.

    python analysis/figure3.py --campaign-dir results/X --out results/X/analysis  (--help: all options)

Parses the arguments, calls :mod:`balagg.analysis.figure3` (where the computation and its
contract live) and writes the files.
"""

from __future__ import annotations

from balagg import settings
from balagg.analysis import figure3
from balagg.analysis.outputs import base_parser, main_wrapper, results_from_args, save_figure


def main() -> int:
    parser = base_parser(figure3.__doc__)
    parser.add_argument("--smoothing", type=int, default=settings.ANALYSIS.smoothing,
                        help="centred moving-average window in logged steps (1: none); default %(default)s")
    parser.add_argument("--cv-metric", default="len_cv", choices=("len_cv", "len_cv_within_group"),
                        help="batch-wide CV (default) or the mean within-group CV")
    args = parser.parse_args()
    results = results_from_args(args)
    save_figure(figure3.make_figure(results, args.smoothing, args.cv_metric), args.out, "figure3")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_wrapper(main))
