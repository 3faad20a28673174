"""Laboratory probe outside the workflow (docs/laboratory.md, "A seventh design"): a task whose wrong
answers are long because of the slip itself, not because of a choice the policy can unlearn.

A *walk* problem ``Walk 14 by 6.`` asks how many steps of ``+6 (mod 20)`` lead from 14 to 0; its worked
solution is the walk, step by step, and the count in a box (``Walk 14 by 6.`` and ``Walk 4 by 4.``):

    14+6=0. \\boxed{1}            4+4=8. 8+4=12. 12+4=16. 16+4=0. \\boxed{4}

Starts and steps are even, so a right walk stays on the even residues and ends at 0 within 5 steps. A
slip to an odd value (``4+4=9.``) puts the walk on the odd residues, which never reach 0: the *same*
rule that ends a right walk (go on until 0) then runs to the length limit. The warm-start data has
right walks and, at ``--p-wrong``, walks with one near-miss (odd) error that go on by the rule until
the limit (no box). There is nothing to unlearn but the error: stopping early after an odd value is as
wrong as going on, so a group's baseline gives neither a push.

The probe: build the walk tiny world (training file in the prepared schema, 37 problems mod 20), warm-start
tiny-s on it, then train one token-agg GRPO cell per seed with the laboratory's recipe through
``python -m balagg train`` (the two seeds side by side), and print by tenths of training: the side-mass
ratio, accuracy, truncation and right / wrong lengths from each cell's metrics.jsonl.

    python bench/walk_probe.py [--out /tmp/walk-probe] [--seeds 0,1] [--steps 200] [--mod 20]
    python bench/walk_probe.py --classify /tmp/walk-probe/model /tmp/walk-probe/seed0/train/checkpoints/step-000200
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

MOD, MAX_STEPS, LOOP_CHARS = 20, 5, 120
REPO = Path(__file__).resolve().parents[1]


def walk(start: int, step: int) -> list[int]:
    """The values after each step of ``+step (mod MOD)`` from ``start`` until 0 (empty if never)."""
    values, value = [], start
    for _ in range(MOD):
        value = (value + step) % MOD
        values.append(value)
        if value == 0:
            return values
    return []


def problems() -> list[tuple[int, int, int]]:
    """Every (start, step, answer) with even start and step in 2..MOD-2 that reaches 0 within MAX_STEPS."""
    found = []
    for start in range(2, MOD, 2):
        for step in range(2, MOD, 2):
            values = walk(start, step)
            if values and len(values) <= MAX_STEPS:
                found.append((start, step, len(values)))
    return found


def _steps_text(start: int, step: int, values: list[int]) -> list[str]:
    texts, value = [], start
    for result in values:
        texts.append(f"{value}+{step}={result}.")
        value = result
    return texts


def right_solution(start: int, step: int) -> str:
    values = walk(start, step)
    return " ".join(_steps_text(start, step, values) + [f"\\boxed{{{len(values)}}}"])


def wrong_solution(start: int, step: int, rng: random.Random) -> str:
    """A near-miss (odd) error at a random step, then the walk by the rule until LOOP_CHARS (no box)."""
    values = walk(start, step)
    j = rng.randrange(len(values))
    wrong = (values[j] + rng.choice((-1, 1))) % MOD
    texts = _steps_text(start, step, values[:j] + [wrong])
    value = wrong
    while len(" ".join(texts)) < LOOP_CHARS:
        result = (value + step) % MOD
        texts.append(f"{value}+{step}={result}.")
        value = result
    return " ".join(texts)[:LOOP_CHARS]


def problem_text(start: int, step: int) -> str:
    return f"Walk {start} by {step}."


def warm_start_examples(seed: int, n: int, p_wrong: float):
    from balagg.tinyworld.tasks import WarmStartExample

    rng = random.Random(f"walk-warm-start-{seed}")
    pool, examples = problems(), []
    for _ in range(n):
        start, step, _ = rng.choice(pool)
        if rng.random() < p_wrong:
            examples.append(WarmStartExample(problem_text(start, step), wrong_solution(start, step, rng), "walk",
                                             False, ends=False))
        else:
            examples.append(WarmStartExample(problem_text(start, step), right_solution(start, step), "walk", True))
    return examples


def build(out: Path, sft_steps: int, p_wrong: float) -> dict:
    """The training file and the warm-started tiny-s (the tiny world's own warm start, on walk examples)."""
    from balagg.tinyworld import model as tiny, warmstart

    rows = [{"id": f"walk-{i:04d}", "problem": problem_text(s, b), "answer": str(k), "source": "walk"}
            for i, (s, b, k) in enumerate(problems())]
    train = out / "data" / "walk.jsonl"
    train.parent.mkdir(parents=True, exist_ok=True)
    train.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tokenizer = tiny.build_tokenizer()
    model = tiny.build_model("tiny-s", tokenizer, seed=0)
    config = warmstart.WarmStartConfig(steps=sft_steps, seed=0)
    examples = warm_start_examples(config.seed, (config.steps + 2) * config.batch_size, p_wrong)
    summary = warmstart.warm_start(model, tokenizer, config, examples)
    tiny.save_checkpoint(model, tokenizer, out / "model", {"warm_start": summary, "task": "walk"})
    return {"train": str(train), "problems": len(rows), "warm_start": summary}


def cell_config(out: Path, seed: int, steps: int) -> Path:
    """The laboratory's recipe (configs/laboratory.yaml) for one token-agg cell of the walk world."""
    from balagg.train.config import CellConfig

    cell = CellConfig(
        model=str(out / "model"), tokenizer=str(out / "model"), model_name="walk-tiny-s", dataset_name="walk",
        train_files=[str(out / "data" / "walk.jsonl")], aggregator="token-agg", seed=seed, total_steps=steps,
        eval_every=steps, save_every=steps, learning_rate=1.0e-4, warmup_steps=0, lr_scheduler="constant",
        weight_decay=0.0, max_grad_norm=1.0, num_generations=8, prompts_per_step=8, mini_batches=2,
        micro_batch_size=32, max_prompt_length=64, max_completion_length=96, overlong_buffer_enabled=False,
        prompt_template="{problem}", use_chat_template=False, answer_format="boxed-strict", output_name=f"walk/token-agg/seed{seed}",
        mlflow_tracking_uri=f"sqlite:///{(out / 'mlflow.db').resolve()}", mlflow_experiment="walk-probe",
    )
    path = out / f"seed{seed}" / "cell.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cell.to_dict(), indent=2))
    return path


STEP = re.compile(r"(\d+)\+(\d+)=(\d+)\.")
BOX = re.compile(r"\\boxed\{(\d+)\}")


def kind_of(text: str, start: int, step: int, count: int) -> str:
    """What a sampled answer to ``Walk start by step.`` is: right; a loop after an odd slip (no box); a
    boxed wrong count after an even slip, an odd one, or none (a miscount); or something else unboxed."""
    box = BOX.search(text)
    if box and int(box.group(1)) == count:
        return "right"
    slip = next((int(c) for a, b, c in STEP.findall(text) if (int(a) + int(b)) % MOD != int(c)), None)
    if box is None:
        return "loop after an odd slip" if slip is not None and slip % 2 else "other, no box"
    if slip is None:
        return "boxed wrong, no slip"
    return "boxed wrong after an even slip" if slip % 2 == 0 else "boxed wrong after an odd slip"


def classify(checkpoint: Path, samples_per_problem: int = 16, seed: int = 1) -> dict[str, tuple[int, float]]:
    """Fresh samples of every problem from ``checkpoint``: ``{kind: (count, mean length in tokens)}``."""
    from balagg.tinyworld import model as tiny, warmstart

    model, tokenizer = tiny.load_checkpoint(checkpoint)
    pool = problems()
    samples = warmstart.sample_completions(model, tokenizer, [problem_text(s, b) for s, b, _ in pool],
                                           samples_per_problem, seed=seed)
    lengths: dict[str, list[int]] = {}
    for sample in samples:
        start, step, count = pool[sample["problem"]]
        lengths.setdefault(kind_of(sample["text"], start, step, count), []).append(sample["length"])
    return {kind: (len(v), round(sum(v) / len(v), 1)) for kind, v in lengths.items()}


def tenths(metrics: Path) -> list[str]:
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    rows = [r for r in rows if "side_mass_ratio/token-agg" in r]
    ratios = [r["side_mass_ratio/token-agg"] for r in rows]
    ratios = [v for v in ratios if v is not None and v == v]
    lines = [f"{len(rows)} steps; ratio >= 1.5 in {sum(v >= 1.5 for v in ratios)} of {len(ratios)} with mixed groups"]
    size = max(1, len(rows) // 10)

    def mean(chunk, key):
        values = [c[key] for c in chunk if c.get(key) is not None and c[key] == c[key]]
        return sum(values) / len(values) if values else float("nan")

    for start in range(0, len(rows), size):
        chunk = rows[start:start + size]
        acc, trunc = mean(chunk, "accuracy"), mean(chunk, "truncation_rate")
        lines.append(f"steps {chunk[0]['step']:3d}-{chunk[-1]['step']:3d}: ratio {mean(chunk, 'side_mass_ratio/token-agg'):.2f} "
                     f"acc {acc:.2f} trunc {trunc:.2f} wrong-ended {1 - acc - trunc:.2f} "
                     f"right/wrong len {mean(chunk, 'len_pos_mean'):.1f}/{mean(chunk, 'len_neg_mean'):.1f} "
                     f"mixed {mean(chunk, 'mixed_group_frac'):.2f}")
    return lines


def main() -> int:
    global MOD  # --mod: every function of the walk world reads the module's modulus
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="/tmp/walk-probe")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--sft-steps", type=int, default=800)
    parser.add_argument("--p-wrong", type=float, default=0.4)
    parser.add_argument("--mod", type=int, default=MOD, help="the modulus (even): larger, more facts to learn")
    parser.add_argument("--classify", nargs="+", metavar="CHECKPOINT",
                        help="only sample these checkpoints afresh (16 per problem) and count the kinds of answers")
    args = parser.parse_args()
    MOD = args.mod
    if args.classify:
        for checkpoint in args.classify:
            print(checkpoint, classify(Path(checkpoint)))
        return 0
    out = Path(args.out)
    started = time.monotonic()
    built = build(out, args.sft_steps, args.p_wrong)
    print(f"built {built['problems']} problems and tiny-s ({args.sft_steps} warm-start steps, "
          f"{built['warm_start']['cpu_seconds']} CPU s, loss {built['warm_start']['loss_last']:.3f})", flush=True)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    jobs = {}
    for seed in (int(s) for s in args.seeds.split(",")):
        cell = cell_config(out, seed, args.steps)
        work = cell.parent
        jobs[seed] = subprocess.Popen([sys.executable, "-m", "balagg", "train", "--cell", str(cell), "--workdir",
                                       str(work / "train"), "--out", str(work / "manifest.json")], env=env,
                                      stdout=open(work / "train.log", "w"), stderr=subprocess.STDOUT)
    failed = [seed for seed, job in jobs.items() if job.wait() != 0]
    for seed in jobs:
        if seed in failed:
            print(f"seed {seed}: training failed, see {out / f'seed{seed}' / 'train.log'}")
            continue
        print(f"seed {seed}:")
        for line in tenths(out / f"seed{seed}" / "train" / "metrics.jsonl"):
            print("  " + line)
    print(f"{time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
