"""mechanism.png / mechanism.pdf / mechanism.csv: where each rule puts the update's weight over training.

    python analysis/mechanism.py --campaign-dir results/X --out results/X/analysis [--smoothing 5]

One row per (model, dataset) setting (a laboratory regime): mean Acc@8 over checkpoints, the negative
side's share of the update mass (sum of w_i |A_i| |o_i|) and the per-token weight of long over short
correct responses, one line per aggregator (balagg.analysis.mechanism). mechanism.csv holds the
summary per setting and aggregator: token-agg's side-mass ratio at start and end, its range, the share
of steps beyond 1.5 / below 0.67, and the length statistics at start and end.
"""

from __future__ import annotations

from balagg.analysis.mechanism import make_figure, mechanism_frame, mechanism_summary
from balagg.analysis.outputs import base_parser, main_wrapper, results_from_args, save_figure, write_text


def main() -> int:
    parser = base_parser(__doc__)
    parser.add_argument("--smoothing", type=int, default=5,
                        help="centred moving-average window in logged steps (1: none); default 5")
    args = parser.parse_args()
    results = results_from_args(args)
    write_text(args.out / "mechanism.csv", mechanism_summary(mechanism_frame(results)).to_csv(index=False))
    save_figure(make_figure(results, args.smoothing), args.out, "mechanism")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_wrapper(main))
