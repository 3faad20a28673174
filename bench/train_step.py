"""Benchmark: seconds per optimiser step of AggregatedGRPOTrainer on a tiny model (CPU), per aggregator.

Target (issue 6): balanced-agg costs no more than 3 % over token-agg per step (median of paired runs).

Each pair trains token-agg and balanced-agg (order alternating between pairs) for --steps optimiser
steps with the same seed and learning rate 0, so both rules generate exactly the same completions and
the only difference is the aggregation. A run's figure is its median step time (the first step, which
warms up, excluded); the pair's figure is the ratio balanced / token; the result is the median ratio.
seq-agg is timed alongside for reference.

    PYTHONPATH=src python bench/train_step.py [--pairs 5] [--steps 12]
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

from balagg.tinyworld.model import build_model, build_tokenizer, load_tokenizer  # noqa: E402
from balagg.train.trainer import AggregatedGRPOTrainer  # noqa: E402


class StepTimer(TrainerCallback):
    """Process CPU seconds per optimiser step (with one torch thread this is the step's compute, and far
    less disturbed than wall time by other jobs on a shared machine)."""

    def __init__(self):
        self.times = []

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.process_time() - self._start)


class TimedTrainer(AggregatedGRPOTrainer):
    """Also accumulates the CPU time spent folding the weights in (gather, weights, diagnostics)."""

    weighting_seconds = 0.0

    def _weight_advantages(self, output):
        start = time.process_time()
        try:
            return super()._weight_advantages(output)
        finally:
            self.weighting_seconds += time.process_time() - start


def parity_reward(completions, **_):
    return [float(len(c) % 2 == 0) for c in completions]


def median_step_seconds(rule: str, model_dir: str, args: argparse.Namespace) -> float:
    tokenizer = load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    dataset = Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(10) for b in range(10)])
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out, loss_type="dr_grpo", beta=0.0, num_generations=args.group_size,
            per_device_train_batch_size=args.micro_batch, gradient_accumulation_steps=args.accumulation,
            max_completion_length=args.max_length, max_steps=args.steps, learning_rate=0.0, seed=0,
            logging_steps=1, report_to="none", bf16=False, gradient_checkpointing=False, save_strategy="no",
            disable_tqdm=True, generation_kwargs={"sequence_bias": {(tokenizer.eos_token_id,): 2.0}},
        )
        timer = StepTimer()
        trainer = TimedTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                                        reward_funcs=[parity_reward], callbacks=[timer], aggregation=rule)
        trainer.train()
    return statistics.median(timer.times[1:]), trainer.weighting_seconds / args.steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--accumulation", type=int, default=4, help="prompts per step = micro*accum/G")
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--size", default="tiny-s")
    args = parser.parse_args()
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as model_dir:
        tokenizer = build_tokenizer()
        build_model(args.size, tokenizer, seed=0).save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        rules = ("token-agg", "balanced-agg", "seq-agg")
        ratios, seconds, weighting = [], {r: [] for r in rules}, {r: [] for r in rules}
        for pair in range(args.pairs):
            order = ["token-agg", "balanced-agg"] if pair % 2 == 0 else ["balanced-agg", "token-agg"]
            result = {}
            for rule in [*order, "seq-agg"]:
                result[rule], per_step_weighting = median_step_seconds(rule, model_dir, args)
                seconds[rule].append(result[rule])
                weighting[rule].append(per_step_weighting)
            ratios.append(result["balanced-agg"] / result["token-agg"])
            print(f"pair {pair}: token-agg {result['token-agg'] * 1e3:.1f} ms/step, "
                  f"balanced-agg {result['balanced-agg'] * 1e3:.1f} ms/step, ratio {ratios[-1]:.4f}", flush=True)

    batch = args.micro_batch * args.accumulation
    print(f"\n{args.size}, {batch} responses/step (G={args.group_size}), <= {args.max_length} tokens, 1 thread")
    for rule, values in seconds.items():
        print(f"{rule:<13} median {statistics.median(values) * 1e3:7.1f} CPU ms/step over {len(values)} runs; "
              f"weight folding {statistics.median(weighting[rule]) * 1e3:.2f} ms/step")
    overhead = statistics.median(ratios) - 1
    print(f"balanced-agg vs token-agg: median paired overhead {overhead * 100:+.2f} % "
          f"(target <= +3 %): {'PASS' if overhead <= 0.03 else 'FAIL'}")


if __name__ == "__main__":
    main()
