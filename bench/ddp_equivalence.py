"""Check: with 2 CPU processes (torchrun, gloo) and groups split across the ranks, AggregatedGRPOTrainer's
token-agg reproduces TRL's dapo and seq-agg reproduces grpo (per-step losses, final parameters).

12 responses per generation batch (G=4, 3 per rank per micro-batch, GA 2): group 1 has 2 responses on
each rank. num_iterations 2, SGD (no Adam amplification of rounding), no gradient clipping. One torchrun
launch trains every run in turn (each trainer seeds itself afresh), so its two processes import TRL once.

    PYTHONPATH=src python bench/ddp_equivalence.py [--quick]

Exits 1 when a pair differs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

WORKER = r'''
import os, sys, torch
torch.set_num_threads(1)
import trl
from datasets import Dataset
from transformers import AutoModelForCausalLM
from balagg.prompts import load_tokenizer
from balagg.train.trainer import AggregatedGRPOTrainer
model_dir, root, steps, *runs = sys.argv[1:]
def parity(completions, **_):
    return [float(len(c) % 2 == 0) for c in completions]
tok = load_tokenizer(model_dir)
for run in runs:  # name:loss_type:rule, one after another in this process; each Trainer seeds itself afresh
    name, loss_type, rule = run.split(":")
    out = os.path.join(root, name)
    args = trl.GRPOConfig(output_dir=out, loss_type=loss_type, beta=0.0, num_generations=4, per_device_train_batch_size=3,
        gradient_accumulation_steps=2, num_iterations=2, max_completion_length=12, max_steps=int(steps), learning_rate=0.1,
        optim="sgd", lr_scheduler_type="constant", seed=3, max_grad_norm=0.0, logging_steps=1, report_to="none",
        bf16=False, use_cpu=True, gradient_checkpointing=False, save_strategy="no", disable_tqdm=True,
        generation_kwargs={"sequence_bias": {(tok.eos_token_id,): 3.0}})
    kw = dict(model=AutoModelForCausalLM.from_pretrained(model_dir), args=args, processing_class=tok, reward_funcs=[parity],
              train_dataset=Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(4) for b in range(4)]))
    trainer = AggregatedGRPOTrainer(**kw, aggregation=rule) if rule != "none" else trl.GRPOTrainer(**kw)
    assert trainer.accelerator.num_processes == 2
    trainer.train()
    if trainer.accelerator.is_main_process:
        losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
        torch.save({"losses": losses, "params": torch.cat([p.detach().flatten() for p in trainer.model.parameters()])},
                   out + ".pt")
'''


PAIRS = (("token-agg", "dapo"), ("seq-agg", "grpo"))
"""(balagg rule, the TRL loss_type it must reproduce)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4, help="optimiser steps per run")
    parser.add_argument("--quick", action="store_true", help="one pair (token-agg vs dapo), 2 steps: checks that the bench runs and still agrees")
    args = parser.parse_args()
    pairs = PAIRS[:1] if args.quick else PAIRS
    steps = 2 if args.quick else args.steps

    import torch

    from balagg.tinyworld.model import build_model, build_tokenizer

    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    with tempfile.TemporaryDirectory() as root:
        model_dir = Path(root) / "model"
        tokenizer = build_tokenizer()
        build_model("tiny-s", tokenizer, seed=0).save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        worker = Path(root) / "worker.py"
        worker.write_text(WORKER)
        runs = [(name, loss_type, rule) for ours, theirs in pairs
                for name, loss_type, rule in ((theirs, theirs, "none"), (ours, "dr_grpo", ours))]
        # one launch trains every run in turn: its two processes start (and import TRL) once
        subprocess.run([torchrun, "--nproc_per_node", "2", str(worker), str(model_dir), root, str(steps),
                        *(":".join(run) for run in runs)], check=True, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        results = {name: torch.load(Path(root) / f"{name}.pt") for name, _, _ in runs}
    failed = 0
    for ours, theirs in pairs:
        a, b = results[ours], results[theirs]
        loss_diff = max(abs(x - y) for x, y in zip(a["losses"], b["losses"], strict=True))
        param_diff = float((a["params"] - b["params"]).norm() / b["params"].norm())
        verdict = "PASS" if loss_diff < 1e-6 and param_diff < 1e-6 else "FAIL"
        failed += verdict == "FAIL"
        print(f"{ours:<10} vs TRL {theirs:<5}: max |loss diff| {loss_diff:.2e} over {len(a['losses'])} steps, "
              f"final params rel. L2 diff {param_diff:.2e}  {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
