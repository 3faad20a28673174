"""What every analysis script shares: its command line, loading the campaign's results, writing outputs atomically.

Each script in ``analysis/`` runs as ``python analysis/<artifact>.py --campaign-dir results/X
--out results/X/analysis`` (plus its own options) and writes its artifact into ``--out``. The campaign's
problems (missing cells, failed cells, missing checkpoints, ...) are printed to stderr, one per line;
``--strict`` turns any of them into an error instead of a marked gap.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from balagg.analysis.results import CampaignResults, load_results
from balagg.io import atomic_path, atomic_write_text

__all__ = ["base_parser", "results_from_args", "write_text", "save_figure", "main_wrapper"]


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--campaign-dir", type=Path, required=True, help="results/{campaign}")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: CAMPAIGN_DIR/analysis)")
    parser.add_argument("--cells", nargs="+", default=None, metavar="PATH",
                        help="files or folders inside the grid's cells (e.g. their eval/curve.csv); "
                             "default: every cell folder found under --campaign-dir")
    parser.add_argument("--strict", action="store_true",
                        help="fail on any missing or failed cell or checkpoint instead of marking gaps")
    return parser


def results_from_args(args: argparse.Namespace) -> CampaignResults:
    """Load the results of the campaign folder named on the command line and report its problems on stderr."""
    results = load_results(args.campaign_dir, args.cells)
    if results.problems:
        print(f"{len(results.problems)} problem(s) in {args.campaign_dir}:", file=sys.stderr)
        print(results.problem_report(), file=sys.stderr)
        if args.strict:
            raise ValueError(f"{len(results.problems)} problem(s) in {args.campaign_dir} (see above); "
                             "rerun without --strict to get marked gaps")
    if args.out is None:
        args.out = Path(args.campaign_dir) / "analysis"
    args.out.mkdir(parents=True, exist_ok=True)
    return results


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file in the same folder, then rename)."""
    atomic_write_text(path, text)


def save_figure(figure, out: Path, stem: str, formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Save ``figure`` as ``out/stem.{png,pdf}`` atomically; return the paths."""
    paths = []
    for fmt in formats:
        path = Path(out) / f"{stem}.{fmt}"
        with atomic_path(path) as temp:
            figure.savefig(temp, format=fmt, dpi=150, bbox_inches="tight")
        paths.append(path)
    return paths


def main_wrapper(main) -> int:
    """Run a script's ``main()``; a ``ValueError`` becomes one ``error: ...`` line and exit code 2."""
    try:
        return int(main() or 0)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
