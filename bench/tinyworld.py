"""Benchmark: wall time of the whole tiny-world build, as the default workflow runs it.

Target: data + both warm-started models in a few minutes on 2 cores. Runs
`tinyworld data`, then `tinyworld model` for the default's tiny-s and tiny-xs side by side (2 processes x 1 thread,
the workflow's packing), and prints each step's wall and CPU seconds and the step-0 card lines.

    python bench/tinyworld.py [--out /tmp/tinyworld-bench] [--sft-steps 800] [--sizes tiny-s,tiny-xs]
                              [--sft-length-buckets 1] [--quick]

``--sft-length-buckets 2`` is the embedded default's warm start (configs/default.yaml): the same update,
each batch padded in two length-sorted halves.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="/tmp/tinyworld-bench")
    parser.add_argument("--sft-steps", type=int, default=800)
    parser.add_argument("--sizes", default="tiny-s,tiny-xs")
    parser.add_argument("--sft-length-buckets", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="tiny shapes, few repeats: checks that the bench runs (seconds); its figures measure nothing")
    args = parser.parse_args()
    data_args, card_args = [], []
    if args.quick:
        args.sft_steps, args.sizes = 2, "tiny-xs"
        data_args = ["--train-problems", "16", "--bench-problems", "2"]
        card_args = ["--card-problems", "2", "--card-samples", "2", "--max-new-tokens", "8"]
    out = Path(args.out)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    cli = [sys.executable, "-m", "balagg", "tinyworld"]
    start = time.perf_counter()
    subprocess.run(cli + ["data", "--out", str(out / "raw"), "--seed", str(args.seed), *data_args], check=True, env=env)
    data_s = time.perf_counter() - start
    print(f"data: {data_s:.1f} s wall")
    jobs = {}
    for size in args.sizes.split(","):
        jobs[size] = (time.perf_counter(), subprocess.Popen(
            cli + ["model", "--size", size, "--raw", str(out / "raw"), "--out", str(out / "models" / size),
                   "--seed", str(args.seed), "--sft-steps", str(args.sft_steps),
                   "--sft-length-buckets", str(args.sft_length_buckets), *card_args],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    for size, (t0, proc) in jobs.items():
        stdout, _ = proc.communicate()
        if proc.returncode != 0:
            print(f"{size}: failed with exit code {proc.returncode}")
            return 1
        card = json.loads((out / "models" / size / "card.json").read_text())
        print(f"{size}: {time.perf_counter() - t0:.1f} s wall (warm start {card['warm_start']['seconds']:.1f} s wall, "
              f"{card['warm_start']['cpu_seconds']:.1f} s CPU; card sampling {card['sampling']['seconds']:.1f} s)")
        print("  " + stdout.strip().splitlines()[-1])
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"total: {time.perf_counter() - start:.1f} s wall, {children.ru_utime + children.ru_stime:.1f} s CPU "
          f"(load average now {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
