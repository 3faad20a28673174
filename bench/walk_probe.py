"""Laboratory probe outside the workflow (docs/laboratory.md): a task whose wrong
answers are long because of the slip itself, not because of a choice the policy can unlearn.

The walk task and its warm-start data are balagg.tinyworld.walks (``Walk 14 by 6.``: how many steps of
``+6 (mod m)`` lead from 14 to 0; an odd slip runs to the length limit by the task's rule); the workflow
trains it as the ``wrong-long-walk`` regime of the tiny world's ``walks`` family at mod 40. The probe
runs it at any modulus (``--mod``, default 20) without the workflow, and any world: the lattice of right
values (``--lattice``), the warm start's near misses (``--slips``), what a flawed walk does after its
slip (``--after-slip stop``: the mirror) and the share of flawed examples (``--p-wrong``); the
``right-long-walk4`` regime's world is ``--mod 80 --lattice 4 --slips=-10,-2,-1,1,2,10 --after-slip stop --p-wrong 0.6``.

The probe: build the walk tiny world (training file in the prepared schema, 37 problems mod 20), warm-start
tiny-s on it, then train one token-agg GRPO cell per seed with the laboratory's recipe through
``python -m balagg train`` (the two seeds side by side), and print by tenths of training: the side-mass
ratio, accuracy, truncation and right / wrong lengths from each cell's metrics.jsonl.

    python bench/walk_probe.py [--out /tmp/walk-probe] [--seeds 0,1] [--steps 200] [--mod 20] [--quick]
    python bench/walk_probe.py --classify /tmp/walk-probe/model /tmp/walk-probe/seed0/train/checkpoints/step-000200
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

MOD = 20
"""The probe's modulus (``--mod``; the workflow's walk world uses balagg.tinyworld.walks.MOD, 40)."""
REPO = Path(__file__).resolve().parents[1]


def problems() -> list:
    """The walk problems (balagg.tinyworld.walks.Walk) at the probe's modulus."""
    from balagg.tinyworld import walks

    return walks.walk_problems(MOD, LATTICE)


LATTICE, SLIPS = 2, (-1, 1)
"""The lattice of right values and the warm start's near misses (``--lattice``, ``--slips``)."""
AFTER_SLIP = "go-on"
"""What a flawed walk does after its slip (``--after-slip``; walks.AFTER_SLIP)."""


def warm_start_examples(seed: int, n: int, p_wrong: float):
    from balagg.tinyworld import walks

    return walks.warm_start_examples(seed, n, p_wrong, walks.WalkWorld(MOD, LATTICE, SLIPS), after_slip=AFTER_SLIP)


def build(out: Path, sft_steps: int, p_wrong: float) -> dict:
    """The training file and the warm-started tiny-s (the tiny world's own warm start, on walk examples)."""
    from balagg.tinyworld import model as tiny, warmstart

    rows = [{"id": f"walk-{i:04d}", "problem": w.problem, "answer": str(w.answer), "source": "walk"}
            for i, w in enumerate(problems())]
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
        prompt_template="{problem}", chat_template=False, answer_format="boxed-strict", output_name=f"walk/token-agg/seed{seed}",
        mlflow_tracking_uri=f"sqlite:///{(out / 'mlflow.db').resolve()}", mlflow_experiment="walk-probe",
    )
    path = out / f"seed{seed}" / "cell.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cell.to_dict(), indent=2))
    return path


STEP = re.compile(r"(\d+)\+(\d+)=(\d+)\.")
BOX = re.compile(r"\\boxed\{(\d+)\}")


def first_slip(text: str) -> tuple[int, int, int] | None:
    """The first step ``a+b=c.`` of ``text`` whose result is wrong (mod :data:`MOD`), or None."""
    return next(((int(a), int(b), int(c)) for a, b, c in STEP.findall(text) if (int(a) + int(b)) % MOD != int(c)), None)


def kind_of(text: str, count: int) -> str:
    """What a sampled answer to a walk of ``count`` steps is: right; no box after a slip off the lattice (a
    loop, or a stop in the mirror); a boxed wrong count after a slip on the lattice, one off it, or none (a
    miscount); or something else unboxed."""
    box = BOX.search(text)
    if box and int(box.group(1)) == count:
        return "right"
    slip = first_slip(text)
    wrong = None if slip is None else slip[2]  # the wrong value written
    if box is None:
        return "no box after an off-lattice slip" if wrong is not None and wrong % LATTICE else "other, no box"
    if wrong is None:
        return "boxed wrong, no slip"
    return "boxed wrong after an on-lattice slip" if wrong % LATTICE == 0 else "boxed wrong after an off-lattice slip"


def classify(checkpoint: Path, samples_per_problem: int = 16, seed: int = 1) -> dict[str, tuple[int, float]]:
    """Fresh samples of every problem from ``checkpoint``: ``{kind: (count, mean length in tokens)}``."""
    from balagg.tinyworld import model as tiny, warmstart

    model, tokenizer = tiny.load_checkpoint(checkpoint)
    pool = problems()
    samples = warmstart.sample_completions(model, tokenizer, [w.problem for w in pool], samples_per_problem, seed=seed)
    lengths: dict[str, list[int]] = {}
    deltas: dict[int, int] = {}
    for sample in samples:
        lengths.setdefault(kind_of(sample["text"], pool[sample["problem"]].answer), []).append(sample["length"])
        slip = first_slip(sample["text"])
        if slip is not None:
            delta = (slip[2] - slip[0] - slip[1]) % MOD
            deltas[delta] = deltas.get(delta, 0) + 1
    kinds = {kind: (len(v), round(sum(v) / len(v), 1)) for kind, v in lengths.items()}
    return {**kinds, "slip deltas (mod)": dict(sorted(deltas.items()))}


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
    global MOD, AFTER_SLIP, LATTICE, SLIPS  # --mod, --after-slip: every function of the walk world reads the module's
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="/tmp/walk-probe")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--sft-steps", type=int, default=800)
    parser.add_argument("--p-wrong", type=float, default=0.4)
    parser.add_argument("--mod", type=int, default=MOD, help="the modulus (even): larger, more facts to learn")
    parser.add_argument("--after-slip", default=AFTER_SLIP, help="go-on (wrong-long-walk) or stop (the mirror, right-long-walk4)")
    parser.add_argument("--lattice", type=int, default=LATTICE, help="right values are multiples of this")
    parser.add_argument("--slips", default=",".join(map(str, SLIPS)), help="the warm start's near misses, comma-separated")
    parser.add_argument("--classify", nargs="+", metavar="CHECKPOINT",
                        help="only sample these checkpoints afresh (16 per problem) and count the kinds of answers")
    parser.add_argument("--quick", action="store_true", help="one seed, 2 training steps, 2 warm-start steps: checks that the probe runs (seconds)")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.steps, args.sft_steps = "0", 2, 2  # 2: one generation cycle of the recipe
    MOD, AFTER_SLIP, LATTICE = args.mod, args.after_slip, args.lattice
    SLIPS = tuple(int(s) for s in args.slips.split(","))
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
