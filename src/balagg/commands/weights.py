"""``python -m balagg weights``: every rule's per-response weights for one set of rewards and lengths.

Shows sign-length coupling on a researcher's own numbers: for each rule, each response's weight
(scaled so that a response's token weight reads as "per 1000 tokens"), and the total weight x |A|
each side of the group carries.
"""

from __future__ import annotations

import argparse

from balagg.aggregation.rules import AGGREGATORS, ALPHA, DEFAULT_SCOPES


def _numbers(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "weights",
        help="print each aggregation rule's per-response weights for given rewards and lengths",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rewards", type=_numbers, required=True, help="comma-separated rewards, e.g. 1,1,0,0,0")
    parser.add_argument("--lengths", type=_numbers, required=True, help="comma-separated response lengths")
    parser.add_argument("--groups", type=_numbers, default=None,
                        help="comma-separated group ids (default: all responses form one group)")
    parser.add_argument("--std", choices=("population", "sample", "none"), default="population",
                        help="advantage normalisation: population std (paper), sample std (TRL), none (Dr.GRPO)")
    parser.add_argument("--max-length", type=float, default=None,
                        help="the generation budget: dr-grpo's and delta-l-norm's constant normaliser "
                             "(default: the longest response)")
    parser.add_argument("--alpha", type=float, default=None,
                        help=f"delta-l-norm's exponent (default {ALPHA.default:g}; the authors' math runs use 0.75)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from balagg.aggregation import aggregation_weights, group_advantages, length_diagnostics

    if len(args.rewards) != len(args.lengths):
        raise ValueError(f"got {len(args.rewards)} rewards but {len(args.lengths)} lengths")
    groups = args.groups if args.groups is not None else [0] * len(args.rewards)
    advantages = group_advantages(args.rewards, groups, std=args.std)
    max_length = args.max_length if args.max_length is not None else max(args.lengths)
    diagnostics = length_diagnostics(args.lengths, advantages, groups, max_length=max_length)
    if args.alpha is not None:  # the side totals of delta-l-norm at the given alpha
        carried = aggregation_weights("delta-l-norm", args.lengths, advantages, groups, scope=DEFAULT_SCOPES["delta-l-norm"],
                                      max_length=max_length, alpha=args.alpha).double() \
            * torch.as_tensor(args.lengths, dtype=torch.float64) * advantages.double().abs()
        diagnostics["side_weight/delta-l-norm/pos"] = float(carried[advantages > 0].sum())
        diagnostics["side_weight/delta-l-norm/neg"] = float(carried[advantages < 0].sum())

    header = f"{'response':>8} {'group':>6} {'reward':>7} {'length':>7} {'advantage':>10}"
    print(header)
    for i, (g, r, n, a) in enumerate(zip(groups, args.rewards, args.lengths, advantages.tolist())):
        print(f"{i:>8} {g:>6g} {r:>7g} {n:>7g} {a:>10.4f}")
    print()
    print("weight per 1000 tokens of each response; side totals = sum of w * length * |A|")
    print(f"{'rule':<24} {'scope':<6} " + " ".join(f"{f'w[{i}]':>8}" for i in range(len(groups)))
          + f" {'pos':>8} {'neg':>8} {'pos/neg':>8}")
    for rule, scope in ((r.name, r.default_scope) for r in AGGREGATORS if not r.needs_micro_batches):
        weights = aggregation_weights(rule, args.lengths, advantages, groups, scope=scope, max_length=max_length,
                                      alpha=args.alpha)
        pos = diagnostics[f"side_weight/{rule}/pos"]
        neg = diagnostics[f"side_weight/{rule}/neg"]
        ratio = f"{pos / neg:8.3f}" if neg > 0 else f"{'-':>8}"
        print(f"{rule:<24} {scope:<6} " + " ".join(f"{1000 * w:8.3f}" for w in weights.tolist())
              + f" {pos:8.4f} {neg:8.4f} {ratio}")
    print()
    print(f"length CV {diagnostics['len_cv']:.3f}; mean length of positives {diagnostics['len_pos_mean']:.1f}, "
          f"of negatives {diagnostics['len_neg_mean']:.1f} (gap {diagnostics['len_gap']:+.1f})")
    return 0
