"""Benchmark: math verification throughput and code-sandbox overhead.

Targets: at least 200 math samples/s on 2 cores (the regression set, tests/data/
math_regression.jsonl, repeated to 10,000 samples, scored by VerifierPool with 2 worker processes), and
under 100 ms of sandbox overhead per trivial program (one stdin test, ``print(input())``), median of
sequential runs. On a shared, loaded machine wall-clock figures understate what 2 idle cores do, so the
CPU time per sample / per run is printed as well. Worker start-up (importing the verifier) is excluded; the verdicts are checked against
the regression set's expected values so a fast wrong run cannot pass.

    python bench/scoring.py [--samples 10000] [--workers 2] [--sandbox-runs 50] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from pathlib import Path

from balagg.evaluation.verify.pool import VerifierPool
from balagg.evaluation.verify.sandbox import Sandbox, isolation_mode

REGRESSION = Path(__file__).resolve().parent.parent / "tests" / "data" / "math_regression.jsonl"


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc (clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def math_throughput(samples: int, workers: int) -> tuple[float, float]:
    """(samples per wall-clock second, CPU seconds per sample of the workers and this dispatcher)."""
    cases = [json.loads(line) for line in REGRESSION.read_text().splitlines() if line.strip()]
    repeated = [cases[i % len(cases)] for i in range(samples)]
    pairs = [(case["text"], case["gold"]) for case in repeated]
    with VerifierPool(workers=workers, timeout_s=10.0) as pool:
        pool.verify(pairs[:workers])  # start the workers
        pids = [worker.process.pid for worker in pool._pool]
        cpu_before = sum(_cpu_seconds(pid) for pid in pids) + time.process_time()
        start = time.perf_counter()
        result = pool.verify(pairs)
        seconds = time.perf_counter() - start
        cpu = sum(_cpu_seconds(pid) for pid in pids) + time.process_time() - cpu_before
    wrong = sum(v != case["expected"] for v, case in zip(result.verdicts, repeated))
    if wrong or result.timed_out:
        raise SystemExit(f"{wrong} wrong verdicts, {len(result.timed_out)} timeouts: not a valid run")
    return samples / seconds, cpu / samples


def sandbox_overhead_ms(runs: int) -> tuple[list[float], float]:
    """Wall-clock ms of each run, and the mean CPU ms (all sandbox processes) per run."""
    sandbox = Sandbox()
    tests = [{"input": "7\n", "output": "7\n", "testtype": "stdin"}]
    times = []
    for index in range(runs + 2):
        if index == 2:
            cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        result = sandbox.run("print(input())\n", tests)
        times.append((time.perf_counter() - start) * 1000)
        if not result.passed:
            raise SystemExit(f"trivial program failed in the sandbox: {result}")
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_ms = ((cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)) * 1000 / runs
    return times[2:], cpu_ms  # first runs warm the page cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sandbox-runs", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="tiny shapes, few repeats: checks that the bench runs (seconds); its figures measure nothing")
    args = parser.parse_args()
    if args.quick:
        args.samples, args.workers, args.sandbox_runs = 40, 1, 2

    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    rate, cpu = math_throughput(args.samples, args.workers)
    print(f"math verification: {rate:.0f} samples/s with {args.workers} workers ({args.samples} samples; "
          f"target >= 200); {cpu * 1000:.1f} CPU ms/sample = {args.workers / cpu:.0f} samples/s "
          f"on {args.workers} idle cores")
    if isolation_mode() == "namespaces":
        times, cpu_ms = sandbox_overhead_ms(args.sandbox_runs)
        print(f"sandbox, trivial program: median {statistics.median(times):.1f} ms, "
              f"p90 {sorted(times)[int(0.9 * len(times))]:.1f} ms wall over {len(times)} runs, "
              f"{cpu_ms:.1f} CPU ms per run (target < 100 ms)")
    else:
        print("sandbox: namespaces unavailable here (needs root and unshare); not measured")


if __name__ == "__main__":
    main()
