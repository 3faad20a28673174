"""GPU smoke test of the paper grid's code paths on one GPU, offline, in at most 8 minutes (bench/gpu_smoke.sh).

Steps (each timed; a failing step is recorded and the others still run), in this order:

0. ``probe-7b`` (below), first, as it needs only torch and transformers; then ``microbatch-fsdp2``
   (bench/fsdp_microbatch.py): an accumulated optimiser step of Qwen2.5-Math-7B's shape (2 micro-batches, the
   widest, micro_batch_size x (prompt + completion) of configs/paper.yaml = 2 x 10,240 tokens, after a
   narrower one, each reduce-scattered) under FSDP2 through ``accelerate launch`` with
   configs/accelerate/fsdp2.yaml, one process per GPU (every visible GPU; 2 on the CPU when dry), with the
   colocated vLLM engine resident where vLLM imports, holding what the model's ``vllm_gpu_memory_utilization``
   gives it on an 80 GiB GPU: peak memory per GPU against balagg.train.memory's figure for the same run
   (the step fails when the model is low by more than 10 %);
1. ``build``: a random Qwen2 of Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads / 2 KV, intermediate
   4864) with the tiny world's tokenizer, saved with ``save_pretrained``; tiny-world arithmetic problems
   as training and benchmark files.
2. ``train-token-agg``, ``train-balanced-agg``: 4 optimiser steps each through ``python -m balagg train``
   with ``configs/accelerate/fsdp2.yaml``, bf16 and gradient checkpointing (the paper grid's
   launcher); ``train-vllm``: the same with colocated vLLM, where vLLM imports.
3. ``resume``: the balanced-agg cell loses its last checkpoint and its manifest and is rerun: it must
   resume from step 2 and end at step 4 (``train-vllm`` runs after the evaluation, being the slowest).
4. ``generate-score``: the last evaluation checkpoint through ``balagg generate`` (vLLM where it imports,
   else transformers, named explicitly: ``auto`` refuses a GPU without vLLM) and ``balagg score``.
5. ``probe-7b``: forward/backward passes of a Qwen2.5-Math-7B-shaped model (hidden 3584, 28 layers, 28 heads /
   4 KV, intermediate 18944, vocab 152064) at the paper's lengths (2048 + 8192 tokens), bf16 autocast over
   fp32 weights, gradient checkpointing: peak memory and tokens/s.

Figures go to ``{out}/gpu_smoke.json`` as each step ends. Without a GPU the script says so and stops,
unless ``--cpu-dry``: then every step runs on the CPU with tiny shapes (the same commands and code), which
is what the test suite does (accelerate then runs its CPU path, plain DDP, and says so in the figures).

    python bench/gpu_smoke.py --out DIR [--cpu-dry] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHAPES = {  # name: (hidden, layers, heads, kv heads, intermediate, vocab or None = the tokenizer's)
    "qwen2.5-0.5b": (896, 24, 14, 2, 4864, None),
    "qwen2.5-math-7b": (3584, 28, 28, 4, 18944, 152064),
    "dry-small": (64, 2, 2, 1, 128, None),
    "dry-7b": (64, 2, 4, 2, 160, 1024),
}
PAPER_LENGTHS = (2048, 8192)  # max_prompt_length + max_completion_length of configs/paper.yaml
DRY_LENGTHS = (16, 48)


class Figures:
    """The JSON file of figures, rewritten after every step (a killed run keeps what it measured)."""

    def __init__(self, path: Path, **header):
        self.path, self.data = path, {**header, "steps": {}}
        self.write()

    def step(self, name: str, **values) -> None:
        self.data["steps"][name] = values
        self.write()
        print(f"[gpu_smoke] {name}: {json.dumps(values, sort_keys=True)}", flush=True)

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.path)


def qwen2_config(shape: str, tokenizer, max_positions: int):
    from transformers import Qwen2Config

    hidden, layers, heads, kv, intermediate, vocab = SHAPES[shape]
    return Qwen2Config(vocab_size=vocab or len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv, intermediate_size=intermediate,
                       max_position_embeddings=max_positions, tie_word_embeddings=True,
                       pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                       eos_token_id=tokenizer.eos_token_id)


def build(workdir: Path, shape: str, seed: int = 0) -> dict:
    """Random model + tokenizer folder and the data files; returns what was built."""
    import torch
    from transformers import GenerationConfig, Qwen2ForCausalLM

    from balagg.tinyworld.model import build_tokenizer

    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(qwen2_config(shape, tokenizer, 4096))
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(workdir / "model")
    tokenizer.save_pretrained(workdir / "model")
    rng = random.Random(seed)
    problems = []
    for i in range(64):
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        problems.append({"id": f"p{i:03d}", "problem": f"Compute {a}+{b}.", "answer": str(a + b)})
    write_jsonl(workdir / "data" / "train.jsonl", problems)
    write_jsonl(workdir / "bench" / "math500.jsonl",
                [{**p, "id": f"math500-{i:04d}", "benchmark": "math500", "kind": "math"}
                 for i, p in enumerate(problems[:8])])
    return {"parameters": sum(p.numel() for p in model.parameters()), "shape": shape,
            "vocab_size": len(tokenizer)}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def cell(workdir: Path, aggregator: str, *, dry: bool, use_vllm: bool = False) -> dict:
    """The smoke cell: 4 steps with checkpoints every 2 on a GPU; 2 steps, checkpoints every step, one CPU
    thread (the tiny shapes give a second one nothing but spinning), when dry."""
    completion, steps, group = (16, 2, 2) if dry else (128, 4, 4)
    return {
        "model": str(workdir / "model"), "train_files": [str(workdir / "data" / "train.jsonl")],
        "aggregator": aggregator, "seed": 0, "model_name": "smoke-qwen2", "dataset_name": "arith",
        "prompt_template": "{problem}", "chat_template": False, "answer_format": "boxed",
        "num_generations": group, "prompts_per_step": group, "mini_batches": 1, "micro_batch_size": group,
        "max_prompt_length": 32, "max_completion_length": completion, "overlong_buffer_len": completion // 4,
        "learning_rate": 1e-5, "warmup_steps": 0, "lr_scheduler": "constant", "total_steps": steps,
        "save_every": steps // 2, "eval_every": steps, "keep_checkpoints": 2, "bf16": True,
        "gradient_checkpointing": True,
        "use_vllm": use_vllm, "vllm_gpu_memory_utilization": 0.3,
        "accelerate_config": str(REPO / "configs" / "accelerate" / "fsdp2.yaml"), "num_processes": 1,
        "verifier_workers": 1, "torch_threads": 1 if dry else 2, "mlflow_tracking_uri": None,
        # the resumable state stays after training: what the launch ran is read off it, and the resume step
        # trains from it again
        "keep_resumable_state": True,
    }


def run(command: list[str], log: Path, timeout: float) -> float:
    """Run ``command`` with its output in ``log``; seconds taken; a failure raises with the log's tail."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    with open(log, "w") as handle:
        result = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO, env=env,
                                timeout=timeout)
    if result.returncode != 0:
        tail = log.read_text()[-1500:]
        raise RuntimeError(f"{' '.join(command[:6])} ... exited {result.returncode}; log {log}:\n{tail}")
    return time.perf_counter() - start


def train(workdir: Path, name: str, spec: dict, timeout: float) -> dict:
    folder = workdir / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cell.json").write_text(json.dumps(spec, indent=2))
    seconds = run([sys.executable, "-m", "balagg", "train", "--cell", str(folder / "cell.json"),
                   "--workdir", str(folder / "train"), "--out", str(folder / "manifest.json")],
                  folder / "train.out", timeout)
    manifest = json.loads((folder / "manifest.json").read_text())
    rows = [json.loads(line) for line in (folder / "train" / "metrics.jsonl").read_text().splitlines()]
    log = (folder / "train" / "train.log").read_text()
    return {"seconds": round(seconds, 1), "steps": manifest["steps"],
            "tokens_per_s": [round(r.get("tokens_per_s", float("nan")), 1) for r in rows],
            "step_seconds": [round(r.get("step_seconds", float("nan")), 2) for r in rows],
            "response_tokens": sum(r.get("response_tokens", 0) for r in rows),
            "checkpoints": [c["step"] for c in manifest["checkpoints"]],
            "distributed": distributed_mode(folder / "train" / "state"), "context": manifest.get("context"),
            "resumed": "resuming from" in log}


def distributed_mode(state: Path) -> str:
    """What the launch really ran, read off a resumable checkpoint: Trainer saves FSDP state with accelerate's
    FSDP helpers (optimizer.bin, *fsdp* files), plain runs as optimizer.pt. accelerate enables FSDP only on
    accelerators, so on a CPU the fsdp2.yaml launch runs without FSDP."""
    checkpoints = sorted(state.glob("checkpoint-*"))
    if not checkpoints:
        return "unknown (no resumable checkpoint)"
    names = [p.name for p in checkpoints[-1].iterdir()]
    if "optimizer.bin" in names or any("fsdp" in name for name in names):
        return "FSDP"
    return "no FSDP (plain Trainer state: " + ", ".join(sorted(n for n in names if n.startswith("optim"))) + ")"


def resume(workdir: Path, name: str, timeout: float) -> dict:
    """Lose the last resumable checkpoint, the record that the cell is trained and the manifest, rerun: it
    must resume from the checkpoint before and end at the last step."""
    folder = workdir / name
    spec = json.loads((folder / "cell.json").read_text())
    last, before = spec["total_steps"], spec["total_steps"] - spec["save_every"]
    shutil.rmtree(folder / "train" / "state" / f"checkpoint-{last}")
    (folder / "train" / "trained.json").unlink()
    (folder / "manifest.json").unlink()
    figures = train(workdir, name, spec, timeout)
    log = (folder / "train" / "train.log").read_text()
    if f"checkpoint-{before} (step {before})" not in log or figures["steps"] != last:
        raise RuntimeError(f"expected a resume from step {before} to step {last}, got {figures}")
    return {**figures, "resumed_from": before}


def generate_and_score(workdir: Path, name: str, timeout: float, dry: bool) -> dict:
    folder = workdir / name
    manifest = json.loads((folder / "manifest.json").read_text())
    checkpoint = manifest["checkpoints"][-1]["path"]
    out = folder / "eval" / f"step-{manifest['checkpoints'][-1]['step']:06d}"
    out.mkdir(parents=True, exist_ok=True)
    seconds = run([sys.executable, "-m", "balagg", "generate", "--checkpoint", checkpoint, "--benchmarks-dir",
                   str(workdir / "bench"), "--benchmarks", "math500", "--n", "8", "--max-tokens",
                   "32" if dry else "256", "--temperature", "1.0", "--top-p", "1.0", "--chat-template", "false",
                   "--backend", "vllm" if importlib.util.find_spec("vllm") is not None else "transformers",
                   "--out", str(out)], folder / "generate.out", timeout)
    seconds += run([sys.executable, "-m", "balagg", "score", "--generations", str(out / "generations.jsonl"),
                    "--benchmarks-dir", str(workdir / "bench"), "--workers", "1", "--out", str(out)],
                   folder / "score.out", timeout)
    meta = json.loads((out / "generation.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    tokens = sum(json.loads(line)["num_tokens"] for line in (out / "generations.jsonl").read_text().splitlines())
    return {"seconds": round(seconds, 1), "backend": meta["backend"], "samples": sum(meta["benchmarks"].values()),
            "generated_tokens": tokens, "generation_seconds": meta["seconds"],
            "acc@8": summary["mean"]["acc@8"], "checkpoint_step": manifest["checkpoints"][-1]["step"]}


def probe(shape: str, prompt: int, completion: int, device: str, repeats: int = 3) -> dict:
    """Peak memory and tokens/s of forward + backward on one sequence of prompt + completion tokens."""
    import torch
    from transformers import Qwen2ForCausalLM

    from balagg.tinyworld.model import build_tokenizer

    length = prompt + completion
    config = qwen2_config(shape, build_tokenizer(), max(length, 4096))
    config.tie_word_embeddings = False  # Qwen2.5-Math-7B has a separate LM head
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)  # fp32 master weights, as the trainer loads them
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    model.train()
    ids = torch.randint(0, config.vocab_size, (1, length), device=device)
    labels = ids.clone()
    labels[:, :prompt] = -100  # the loss covers the completion, as the policy-gradient loss does
    cuda = device.startswith("cuda")
    times = []
    for i in range(repeats + 1):  # the first pass warms up and is not timed
        if cuda:
            torch.cuda.synchronize()
            if i == 1:
                torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        if i:
            times.append(time.perf_counter() - start)
    figures = {"shape": shape, "parameters": sum(p.numel() for p in model.parameters()),
               "prompt_tokens": prompt, "completion_tokens": completion,
               "seconds_per_pass": round(min(times), 4), "tokens_per_s": round(length / min(times), 1),
               "dtype": "fp32 weights, bf16 autocast", "gradient_checkpointing": True}
    if cuda:
        figures["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        figures["weights_gib"] = round(figures["parameters"] * 4 / 2**30, 2)
        figures["device_name"] = torch.cuda.get_device_name()
    del model
    return figures


PLAN_LOW_LIMIT = 0.10
"""The step fails when balagg.train.memory's allocation for the measured run is below the measured peak by
more than this share (a plan that is low sends jobs to run out of memory)."""


def microbatch(workdir: Path, processes: int, timeout: float, dry: bool) -> dict:
    """bench/fsdp_microbatch.py through the paper's launcher with ``processes`` processes; its figures. A
    measured peak above the memory model's figure by more than :data:`PLAN_LOW_LIMIT` fails the step."""
    out = workdir / "microbatch" / "figures.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(REPO / "configs" / "accelerate" / "fsdp2.yaml"), "--num_processes", str(processes),
               "--main_process_port", "0", str(REPO / "bench" / "fsdp_microbatch.py"), "--out", str(out)]
    run(command + (["--quick"] if dry else []), out.parent / "microbatch.out", timeout)
    figures = json.loads(out.read_text())
    low = figures.get("plan_low_by")
    if low is not None and low > PLAN_LOW_LIMIT:
        raise RuntimeError(f"the memory model is low: it expects {figures['expected_allocated_gib']} GiB allocated, "
                           f"the run peaked at {figures['peak_allocated_gib']} GiB (the model is low by {low:.1%} of the peak; "
                           f"figures {out})")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", "results/gpu_smoke"),
                        help="folder of gpu_smoke.json (default $OUT, else %(default)s)")
    parser.add_argument("--workdir", default=None, help="scratch folder (default: {out}/work)")
    parser.add_argument("--cpu-dry", action="store_true", help="no GPU: run every step on the CPU with tiny shapes")
    parser.add_argument("--step-timeout", type=float, default=240.0, help="seconds per subprocess step")
    parser.add_argument("--skip", default="", help="comma-separated steps to leave out (e.g. probe-7b)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "src"))

    import torch

    gpu = torch.cuda.is_available()
    out = Path(args.out).resolve()
    workdir = Path(args.workdir).resolve() if args.workdir else out / "work"
    if not gpu and not args.cpu_dry:
        message = "no GPU (torch.cuda.is_available() is False): nothing measured; --cpu-dry runs the steps on the CPU"
        Figures(out / "gpu_smoke.json", gpu=False, mode="none", message=message)
        print(f"[gpu_smoke] {message}", flush=True)
        return 2
    dry = not gpu
    if dry:
        print("[gpu_smoke] no GPU detected: --cpu-dry, tiny shapes on the CPU (no figure here is a GPU figure)",
              flush=True)
    figures = Figures(out / "gpu_smoke.json", gpu=gpu, mode="cpu-dry" if dry else "gpu",
                      device=torch.cuda.get_device_name() if gpu else "cpu",
                      versions={name: _version(name) for name in ("torch", "transformers", "trl", "accelerate",
                                                                  "vllm")})
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    failures = 0

    def step(name, function, *call_args):
        nonlocal failures
        if name in skip:
            figures.step(name, status="skipped", reason="--skip")
            return None
        start = time.perf_counter()
        try:
            values = function(*call_args)
        except Exception as error:  # record it and go on: every other step still reports
            failures += 1
            figures.step(name, status="failed", error=str(error)[-2000:], elapsed_s=round(time.perf_counter() - start, 1))
            return None
        figures.step(name, status="ok", elapsed_s=round(time.perf_counter() - start, 1), **values)
        return values

    # the probe first: it needs only torch and transformers, and the plan's rates come from it
    step("probe-7b", probe, "dry-7b" if dry else "qwen2.5-math-7b", *(DRY_LENGTHS if dry else PAPER_LENGTHS),
         "cuda" if gpu else "cpu")
    if gpu:
        torch.cuda.empty_cache()
    step("microbatch-fsdp2", microbatch, workdir, torch.cuda.device_count() if gpu else 2, args.step_timeout, dry)
    built = step("build", build, workdir, "dry-small" if dry else "qwen2.5-0.5b")
    if built is not None:
        for rule in ("token-agg", "balanced-agg"):
            step(f"train-{rule}", train, workdir, rule, cell(workdir, rule, dry=dry), args.step_timeout)
        if figures.data["steps"].get("train-balanced-agg", {}).get("status") == "ok":
            step("resume", resume, workdir, "balanced-agg", args.step_timeout)
            step("generate-score", generate_and_score, workdir, "balanced-agg", args.step_timeout, dry)
        if importlib.util.find_spec("vllm") is not None and gpu:  # last: its engine start is the slowest step
            step("train-vllm", train, workdir, "vllm", cell(workdir, "balanced-agg", dry=dry, use_vllm=True),
                 args.step_timeout)
        else:
            figures.step("train-vllm", status="skipped",
                         reason="vllm is not importable" if gpu else "no GPU (TRL's colocated vLLM needs one)")
    figures.data["failures"] = failures
    figures.write()
    print(f"[gpu_smoke] figures in {figures.path}; {failures} step(s) failed", flush=True)
    return 1 if failures else 0


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
