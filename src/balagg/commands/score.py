"""``python -m balagg score``: score generations.jsonl against the benchmark files.

Writes ``{out}/scores.jsonl`` (per problem: correct and truncated flags per sample) and
``{out}/summary.json`` (per benchmark Acc@n, Best@n, counts, truncation rate; the mean over benchmarks;
the verifier's name and version) -- docs/files.md. Runs on a CPU, separately from generation, so it can
be rerun when the verifier changes.
"""

from __future__ import annotations

import argparse
import sys

from balagg import settings
from balagg.benchmarks import MEAN, UNPARSABLE_GOLD_IDS, acc_metric, best_metric
from balagg.prompts import ANSWER_FORMATS


def _ks(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("score", help="score generations: scores.jsonl and summary.json",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generations", required=True, help="generations.jsonl written by `balagg generate`")
    parser.add_argument("--benchmarks-dir", required=True, help="directory of {benchmark}.jsonl files")
    parser.add_argument("--out", required=True, help="output directory (e.g. .../eval/step-000040)")
    parser.add_argument("--checkpoint", default=None, help="recorded in summary.json (default: generation.json's)")
    parser.add_argument("--step", type=int, default=None, help="recorded in summary.json (default: from step-N in --out)")
    parser.add_argument("--workers", type=int, default=settings.VERIFIER.workers,
                        help="verifier processes / concurrent sandboxes")
    parser.add_argument("--math-timeout", type=float, default=settings.VERIFIER.math_timeout_s,
                        help="seconds per math sample")
    parser.add_argument("--code-timeout", type=float, default=settings.EVAL.code_timeout_s,
                        help="wall-clock seconds per code test")
    parser.add_argument("--pass-k", type=_ks, default=(), help="also report unbiased pass@k, e.g. 1,2,4 (k <= n)")
    parser.add_argument("--allow-missing", action="store_true",
                        help="score even if some benchmark problems have no generations (they are left out)")
    parser.add_argument("--strict-golds", action="store_true",
                        help="stop at a gold answer the math verifier cannot parse (default: score that problem "
                             "incorrect in every sample, count it in summary.json and name it at the end)")
    parser.add_argument("--answer-format", choices=ANSWER_FORMATS, default=None,
                        help="math answer extraction (default: generation.json's, what the prompt asked for)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from balagg.evaluation.scoring.score import ScoreConfig, score

    config = ScoreConfig(workers=args.workers, math_timeout_s=args.math_timeout, code_timeout_s=args.code_timeout,
                         pass_ks=args.pass_k, allow_missing=args.allow_missing,
                         answer_format=args.answer_format, strict_golds=args.strict_golds)
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
