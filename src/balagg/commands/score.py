"""``python -m balagg score``: score generations.jsonl against the benchmark files.

Writes ``{out}/scores.jsonl`` (per problem: correct and truncated flags per sample) and
``{out}/summary.json`` (per benchmark Acc@n, Best@n, counts, truncation rate; the mean over benchmarks;
the verifier's name and version) -- docs/files.md. Runs on a CPU, separately from generation, so it can
be rerun when the verifier changes.
"""

from __future__ import annotations

import argparse
import sys

from balagg.benchmarks import MEAN, UNPARSABLE_GOLD_IDS, acc_metric, best_metric


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from balagg.config_flags import add_config_arguments
    from balagg.evaluation.scoring.config import ScoreConfig

    parser = subparsers.add_parser("score", help="score generations: scores.jsonl and summary.json",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generations", required=True, help="generations.jsonl written by `balagg generate`")
    parser.add_argument("--benchmarks-dir", required=True, help="directory of {benchmark}.jsonl files")
    parser.add_argument("--out", required=True, help="output directory (e.g. .../eval/step-000040)")
    parser.add_argument("--checkpoint", default=None, help="recorded in summary.json (default: generation.json's)")
    parser.add_argument("--step", type=int, default=None, help="recorded in summary.json (default: from step-N in --out)")
    add_config_arguments(parser.add_argument_group("scoring settings (ScoreConfig)"), ScoreConfig)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from balagg.config_flags import config_from_args
    from balagg.evaluation.scoring.score import ScoreConfig, score

    config = config_from_args(ScoreConfig, args)
    summary = score(args.generations, args.benchmarks_dir, args.out, config, checkpoint=args.checkpoint, step=args.step)
    _print_summary(summary)
    return 0


def _print_summary(summary: dict) -> None:
    acc, best = acc_metric(summary["n"]), best_metric(summary["n"])
    print(f"{'benchmark':<16} {acc:>8} {best:>8} {'problems':>9} {'trunc':>6}")
    for name, entry in summary["benchmarks"].items():
        print(f"{name:<16} {entry[acc]:>8.4f} {entry[best]:>8.4f} {entry['n_problems']:>9d} "
              f"{entry['truncation_rate']:>6.3f}")
    mean = summary[MEAN]
    print(f"{MEAN:<16} {mean[acc]:>8.4f} {mean[best]:>8.4f}")
    unparsable = {name: entry[UNPARSABLE_GOLD_IDS] for name, entry in summary["benchmarks"].items()
                  if entry.get(UNPARSABLE_GOLD_IDS)}
    if unparsable:
        print("unparsable gold answers, scored incorrect (--strict-golds to stop at them): " + "; ".join(
            f"{name} {len(ids)} ({', '.join(ids)})" for name, ids in unparsable.items()), file=sys.stderr)
