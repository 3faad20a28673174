"""Benchmark: cost of computing aggregation weights vs. one aggregate() call.

Targets: aggregation_weights for 512 groups x 16 responses under 2 ms median on one CPU, and under
5 % of one aggregate() call on a [8192, 4096] per-token loss.

    python bench/aggregation.py [--repeats 50] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from balagg.aggregation import aggregate, aggregation_weights, group_advantages
from balagg.aggregation.rules import RULES


def median_seconds(fn, repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=512)
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="tiny shapes, few repeats: checks that the bench runs (seconds); its figures measure nothing")
    args = parser.parse_args()
    if args.quick:
        args.groups, args.group_size, args.tokens, args.repeats = 8, 4, 64, 3

    gen = torch.Generator().manual_seed(0)
    batch = args.groups * args.group_size
    group_ids = torch.arange(args.groups).repeat_interleave(args.group_size)[torch.randperm(batch, generator=gen)]
    rewards = torch.randint(0, 2, (batch,), generator=gen).float()
    advantages = group_advantages(rewards, group_ids)
    lengths = torch.randint(1, args.tokens + 1, (batch,), generator=gen)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; batch {args.groups} groups x "
          f"{args.group_size} responses (shuffled group ids)")
    weight_times = {}
    for rule in RULES:
        weight_times[rule] = median_seconds(
            lambda rule=rule: aggregation_weights(rule, lengths, advantages, group_ids, max_length=args.tokens),
            args.repeats,
        )
        print(f"aggregation_weights {rule:<20} median {1e3 * weight_times[rule]:7.3f} ms")

    per_token_loss = torch.randn(batch, args.tokens, generator=gen)
    mask = torch.arange(args.tokens)[None, :] < lengths[:, None]
    weights = aggregation_weights("balanced-agg", lengths, advantages, group_ids)
    aggregate_time = median_seconds(lambda: aggregate(per_token_loss, mask, weights), max(5, args.repeats // 5))
    print(f"aggregate [{batch}, {args.tokens}] float32          median {1e3 * aggregate_time:7.3f} ms")
    worst_rule = max(weight_times, key=weight_times.get)
    worst = weight_times[worst_rule]
    print(f"slowest weights ({worst_rule}): {1e3 * worst:.3f} ms = {100 * worst / aggregate_time:.2f} % of aggregate "
          f"(targets: < 2 ms, < 5 %)")


if __name__ == "__main__":
    main()
