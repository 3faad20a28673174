"""diagnosis.md: measured length statistics and the predicted and observed better aggregation.

    python analysis/diagnosis.py --campaign-dir results/X --out results/X/analysis  (--help: all options)

Parses the arguments, calls :mod:`balagg.analysis.diagnosis` (where the computation and its
contract live) and writes the files.
"""

from __future__ import annotations

from balagg import settings
from balagg.analysis import diagnosis as diagnosis_lib
from balagg.analysis.outputs import base_parser, main_wrapper, results_from_args, write_text


def main() -> int:
    parser = base_parser(diagnosis_lib.__doc__)
    parser.add_argument("--cv-threshold", type=float, default=settings.ANALYSIS.cv_threshold,
                        help="length CV counted as high (ours)")
    parser.add_argument("--gap-threshold", type=float, default=settings.ANALYSIS.gap_threshold,
                        help="|neg - pos length gap| / mean length counted as large (ours)")
    args = parser.parse_args()
    results = results_from_args(args)
    diagnosis = diagnosis_lib.diagnose(results, args.cv_threshold, args.gap_threshold)
    write_text(args.out / "diagnosis.csv", diagnosis.to_csv(index=False))
    write_text(args.out / "diagnosis.md",
               diagnosis_lib.to_markdown(diagnosis, diagnosis_lib.length_stats(results), results, args.cv_threshold,
                                         args.gap_threshold))
    return 0


if __name__ == "__main__":
    raise SystemExit(main_wrapper(main))
