"""Benchmark: CPU seconds per optimiser step of AggregatedGRPOTrainer on a tiny model, per aggregator.

Target: balanced-agg costs no more than 3 % over token-agg per step (median of paired runs).

The rules are compared inside one training run, step by step, so that slow drifts in the load of a
shared machine hit both sides of a pair alike: steps come in rounds of three (token-agg,
balanced-agg, seq-agg, in an order that rotates each round); every step of a round starts from the same
RNG seed, the learning rate is 0 and all prompts are equal, so the three steps of a round generate
exactly the same completions and differ only in how they aggregate. A round's figure is the ratio of
balanced-agg's to token-agg's process CPU time; the result is the median over rounds (the first round,
which warms up, excluded). The CPU time spent folding the weights into the advantages (gathering,
weights, diagnostics) is reported separately; the trainer is timed around its weight-folding method
whatever that method's arguments, and a run in which it was never called is refused.

    PYTHONPATH=src python bench/train_step.py [--rounds 40] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, TrainerCallback  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from balagg.aggregation.rules import DEFAULT_SCOPES  # noqa: E402
from balagg.prompts import load_tokenizer  # noqa: E402
from balagg.tinyworld.model import build_model, build_tokenizer  # noqa: E402
from balagg.train.trainer import AggregatedGRPOTrainer  # noqa: E402

RULES = ("token-agg", "balanced-agg", "seq-agg")


class TimedTrainer(AggregatedGRPOTrainer):
    """Accumulates the CPU time spent folding the weights into the advantages (AggregatedGRPOTrainer's
    ``_weight_advantages``, its arguments passed through as they come) since the last reset."""

    weighting_seconds = 0.0
    foldings = 0

    def _weight_advantages(self, *args, **kwargs):
        start = time.process_time()
        try:
            return super()._weight_advantages(*args, **kwargs)
        finally:
            self.weighting_seconds += time.process_time() - start
            self.foldings += 1


class RoundRobin(TrainerCallback):
    """Sets each step's rule and seed; records (round, rule, CPU seconds, weighting seconds)."""

    def __init__(self):
        self.trainer = None
        self.records = []

    def on_step_begin(self, args, state, control, **kwargs):
        step = state.global_step
        round_, position = divmod(step, len(RULES))
        shift = round_ % len(RULES)
        self.rule = RULES[(position + shift) % len(RULES)]
        self.trainer.aggregation, self.trainer.aggregation_scope = self.rule, DEFAULT_SCOPES[self.rule]
        torch.manual_seed(round_)
        self.trainer.weighting_seconds = 0.0
        self.round = round_
        self.start = time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        seconds = time.process_time() - self.start
        lengths = (self.trainer.generation_stats["len_mean"], self.trainer.generation_stats["len_std"])
        self.records.append((self.round, self.rule, seconds, self.trainer.weighting_seconds, lengths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--accumulation", type=int, default=4, help="responses per step = micro * accumulation")
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--size", default="tiny-s")
    parser.add_argument("--quick", action="store_true", help="tiny shapes, few rounds: checks that the bench runs (seconds); its figures measure nothing")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.group_size, args.micro_batch, args.accumulation, args.max_length = 2, 4, 4, 1, 8
        args.size = "tiny-xs"
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as root:
        tokenizer = build_tokenizer()
        build_model(args.size, tokenizer, seed=0).save_pretrained(root)
        tokenizer.save_pretrained(root)
        tokenizer = load_tokenizer(root)
        config = GRPOConfig(
            output_dir=os.path.join(root, "out"), loss_type="dr_grpo", beta=0.0, num_generations=args.group_size,
            per_device_train_batch_size=args.micro_batch, gradient_accumulation_steps=args.accumulation,
            max_completion_length=args.max_length, max_steps=(args.rounds + 1) * len(RULES), learning_rate=0.0,
            seed=0, logging_steps=1, report_to="none", bf16=False, use_cpu=True, gradient_checkpointing=False,
            save_strategy="no", disable_tqdm=True,
            generation_kwargs={"sequence_bias": {(tokenizer.eos_token_id,): 2.0}},
        )
        clock = RoundRobin()
        trainer = TimedTrainer(
            model=AutoModelForCausalLM.from_pretrained(root), args=config, processing_class=tokenizer,
            train_dataset=Dataset.from_list([{"prompt": "12+34="}] * 64), callbacks=[clock],
            reward_funcs=[lambda completions, **_: [float(len(c) % 2 == 0) for c in completions]],
            aggregation="token-agg",
        )
        clock.trainer = trainer
        trainer.train()
    if trainer.foldings == 0:
        raise SystemExit("AggregatedGRPOTrainer._weight_advantages() was never called: the trainer folds its weights "
                         "elsewhere now; time that method in TimedTrainer")

    by_round: dict[int, dict[str, float]] = {}
    weighting = {rule: [] for rule in RULES}
    lengths_by_round: dict[int, set] = {}
    for round_, rule, seconds, folding, lengths in clock.records:
        lengths_by_round.setdefault(round_, set()).add(lengths)
        if round_ == 0:
            continue
        by_round.setdefault(round_, {})[rule] = seconds
        weighting[rule].append(folding)
    same = sum(len(v) == 1 for v in lengths_by_round.values())
    rounds = [r for r in by_round.values() if len(r) == len(RULES)]
    ratios = [r["balanced-agg"] / r["token-agg"] for r in rounds]
    batch = args.micro_batch * args.accumulation
    print(f"{args.size}, {batch} responses/step (G={args.group_size}), <= {args.max_length} tokens, 1 thread, "
          f"{len(rounds)} rounds; identical completions within {same}/{len(lengths_by_round)} rounds")
    for rule in RULES:
        print(f"{rule:<13} median {statistics.median(r[rule] for r in rounds) * 1e3:7.2f} CPU ms/step; "
              f"weight folding {statistics.median(weighting[rule]) * 1e3:.2f} ms/step")
    overhead = statistics.median(ratios) - 1
    quartiles = statistics.quantiles(ratios, n=4)
    print(f"balanced-agg / token-agg per round: median {statistics.median(ratios):.4f} "
          f"(quartiles {quartiles[0]:.4f}, {quartiles[2]:.4f})")
    print(f"median paired overhead {overhead * 100:+.2f} % (target <= +3 %): {'PASS' if overhead <= 0.03 else 'FAIL'}")


if __name__ == "__main__":
    main()
