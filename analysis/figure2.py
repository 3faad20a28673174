"""Figure 2: policy-gradient loss over training steps, one panel per dataset.

    python analysis/figure2.py --campaign-dir results/X --out results/X/analysis  (--help: all options)

Parses the arguments, calls :mod:`balagg.analysis.figure2` (where the computation and its
contract live) and writes the files.
"""

from __future__ import annotations

from balagg import settings
from balagg.analysis import figure2
from balagg.analysis.outputs import base_parser, main_wrapper, results_from_args, save_figure


def main() -> int:
    parser = base_parser(figure2.__doc__)
    parser.add_argument("--model", default=None, help="the model whose runs are shown (default: the first)")
    parser.add_argument("--smoothing", type=int, default=settings.ANALYSIS.smoothing,
                        help="centred moving-average window in logged steps (1: none); default %(default)s")
    args = parser.parse_args()
    results = results_from_args(args)
    save_figure(figure2.make_figure(results, args.model, args.smoothing), args.out, "figure2")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_wrapper(main))
