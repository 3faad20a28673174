"""Score ``generations.jsonl`` against the benchmark files: ``scores.jsonl`` and ``summary.json``.

Per sample: math answers go through :func:`balagg.evaluation.verify.math_verifier.verify_math` in a
:class:`~balagg.evaluation.verify.pool.VerifierPool` (a sample past the per-sample timeout, or whose verification
raises, scores 0 and is counted); code answers (the last fenced block after the reasoning, see
:func:`~balagg.prompts.strip_reasoning`) run in the :class:`~balagg.evaluation.verify.sandbox.Sandbox`
and score 1 only if every test passes. Per problem: the 0/1 flags and truncation flags
(``finish_reason == "length"``) of samples 0..n-1. Per benchmark (:mod:`balagg.evaluation.scoring.metrics`):
``acc@n`` = mean over problems of c/n, ``best@n`` = share of problems with c > 0, ``best@n_bootstrap`` =
verl's bootstrap best@n (:func:`~balagg.evaluation.scoring.metrics.bootstrap_best_at_n`), optional unbiased
``pass@k``, problem and sample counts, truncation rate. ``mean``: the unweighted mean over the
benchmarks present. File formats: docs/files.md.
"""

from __future__ import annotations

import json
import logging
import os
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from balagg.benchmarks import UNPARSABLE_GOLD_IDS, UNPARSABLE_GOLDS, benchmark_rank, eval_metrics, pass_metric
from balagg.io import read_jsonl, write_json, write_jsonl
from balagg.prompts import strip_reasoning
from balagg.evaluation.verify.math_verifier import gold_is_parsable, verifier_info
from balagg.evaluation.scoring.config import ScoreConfig
from balagg.evaluation.scoring.metrics import benchmark_metrics
from balagg.evaluation.verify.pool import VerifierPool
from balagg.evaluation.verify.sandbox import Sandbox, SandboxLimits, extract_code
from balagg.layout import GENERATION_META_FILE, SCORES_FILE, SUMMARY_FILE, dataset_filename, step_of_path
from balagg.prompts import DEFAULT_ANSWER_FORMAT, answer_for_verifier

log = logging.getLogger(__name__)

_GENERATION_KEYS = ("benchmark", "problem_id", "sample", "text", "finish_reason")


@dataclass
class _Problem:
    benchmark: str
    record: dict
    samples: list[dict] = field(default_factory=list)
    flags: list[int] = field(default_factory=list)


def load_benchmark_records(benchmarks_dir: Path, name: str) -> dict[str, dict]:
    """``{id: record}`` of ``{benchmarks_dir}/{name}.jsonl``; a record without an id, a kind or (code) tests is
    an error naming the line. A math record's gold is checked when scored: one the verifier cannot parse
    (or none) scores 0 and is counted."""
    path = benchmarks_dir / dataset_filename(name)
    if not path.is_file():
        raise ValueError(f"benchmark file {path} not found")
    records: dict[str, dict] = {}
    for lineno, record in enumerate(read_jsonl(path), start=1):
        where = f"{path}:{lineno}"
        if not isinstance(record.get("id"), str):
            raise ValueError(f"{where}: record has no string 'id'")
        kind = record.get("kind")
        if kind == "code" and not (isinstance(record.get("tests"), list) and record["tests"]):
            raise ValueError(f"{where} ({record['id']}): code record has no 'tests'")
        if kind not in ("math", "code"):
            raise ValueError(f"{where} ({record['id']}): kind must be 'math' or 'code', got {kind!r}")
        if record["id"] in records:
            raise ValueError(f"{where}: duplicate id {record['id']}")
        records[record["id"]] = record
    return records


def group_generations(generations: Path, benchmarks_dir: Path, allow_missing: bool) -> tuple[dict, int]:
    """Problems (keyed by benchmark and id) with their samples sorted by index, and n (same everywhere)."""
    records: dict[str, dict[str, dict]] = {}
    problems: dict[tuple[str, str], _Problem] = {}
    for lineno, row in enumerate(read_jsonl(generations), start=1):
        missing = [key for key in _GENERATION_KEYS if key not in row]
        if missing:
            raise ValueError(f"{generations}:{lineno}: generation lacks {', '.join(missing)}")
        name, pid = row["benchmark"], row["problem_id"]
        if name not in records:
            records[name] = load_benchmark_records(benchmarks_dir, name)
        if pid not in records[name]:
            raise ValueError(f"{generations}:{lineno}: problem {pid} is not in benchmark {name}")
        if not isinstance(row["text"], str):
            raise ValueError(f"{generations}:{lineno}: text of {pid} sample {row['sample']} is not a string")
        problems.setdefault((name, pid), _Problem(name, records[name][pid])).samples.append(row)
    if not problems:
        raise ValueError(f"{generations} has no generations")
    sizes = set()
    for (name, pid), problem in problems.items():
        problem.samples.sort(key=lambda row: row["sample"])
        indices = [row["sample"] for row in problem.samples]
        if indices != list(range(len(indices))):
            raise ValueError(f"{name}/{pid}: sample indices must be 0..n-1 once each, got {indices}")
        sizes.add(len(indices))
    if len(sizes) != 1:
        raise ValueError(f"every problem needs the same number of samples, got {sorted(sizes)}")
    for name, by_id in records.items():
        absent = [pid for pid in by_id if (name, pid) not in problems]
        if absent and not allow_missing:
            raise ValueError(f"{name}: {len(absent)} problem(s) have no generations, e.g. {absent[:3]} "
                             "(pass allow_missing to score the rest)")
        if absent:
            log.warning("%s: %d problem(s) without generations are left out", name, len(absent))
    # the paper's benchmark order, then file order of problems
    ordered = dict(sorted(problems.items(), key=lambda item: (
        benchmark_rank(item[0][0]), list(records[item[0][0]]).index(item[0][1]))))
    return ordered, sizes.pop()


def _score_math(problems: list[_Problem], config: ScoreConfig, counts: dict, unparsable: dict[str, list[str]],
                answer_format: str, pool: VerifierPool | None = None) -> None:
    """Each sample's flag; a problem whose gold the verifier cannot read scores 0 in every sample and
    its id goes to ``unparsable[benchmark]`` (``strict_golds``: a ValueError naming it instead)."""
    scorable = []
    for problem in problems:  # a gold the verifier cannot read: every sample incorrect, counted (lighteval's rule)
        if gold_is_parsable(problem.record["answer"]):
            scorable.append(problem)
            continue
        if config.strict_golds:
            raise ValueError(f"{problem.benchmark}/{problem.record['id']}: gold answer "
                             f"{problem.record['answer']!r} cannot be parsed by the math verifier (strict_golds)")
        unparsable[problem.benchmark].append(problem.record["id"])
    pairs, owners = [], []
    for problem in scorable:
        for row in problem.samples:
            answer = answer_for_verifier(row["text"], answer_format)  # the trainer's reward reads the same
            if answer is None:
                counts[problem.benchmark]["no_answer"] += 1
                continue
            pairs.append((answer, problem.record["answer"]))
            owners.append((problem, row["sample"]))
    if not pairs:
        return
    if pool is None:
        with VerifierPool(workers=config.workers, timeout_s=config.math_timeout_s) as own:
            result = own.verify(pairs)
    else:
        result = pool.verify(pairs)
    for (problem, sample), verdict in zip(owners, result.verdicts):
        problem.flags[sample] = int(verdict)
    for index in result.timed_out:
        counts[owners[index][0].benchmark]["verifier_timeouts"] += 1
    for index, error in result.errors.items():
        counts[owners[index][0].benchmark]["verifier_errors"] += 1
        log.warning("%s sample %d: verifier error %s", owners[index][0].record["id"], owners[index][1], error)


def _score_code(problems: list[_Problem], config: ScoreConfig, counts: dict) -> dict:
    limits = config.sandbox_limits or SandboxLimits(timeout_s=config.code_timeout_s)
    try:
        sandbox = Sandbox(limits)
    except RuntimeError as error:  # no safe way to run untrusted code on this machine
        raise ValueError(f"cannot score code benchmarks here: {error}") from None
    jobs = []
    for problem in problems:
        for row in problem.samples:
            code = extract_code(strip_reasoning(row["text"]))
            if code is None:
                counts[problem.benchmark]["no_code"] += 1
                continue
            jobs.append((problem, row["sample"], code))

    def run(job):
        problem, _, code = job
        return sandbox.run(code, problem.record["tests"], problem.record.get("fn_name"))

    with ThreadPoolExecutor(max_workers=config.workers) as executor:
        for (problem, sample, _), result in zip(jobs, executor.map(run, jobs)):
            problem.flags[sample] = int(result.passed)
            if not result.passed:
                counts[problem.benchmark][f"code_{result.reason}"] += 1
    return {"isolation": sandbox.mode, "timeout_s_per_test": limits.timeout_s, "memory_mb": limits.memory_mb,
            "max_processes": limits.max_processes, "max_output_bytes": limits.max_output_bytes}


def score(generations: str | os.PathLike, benchmarks_dir: str | os.PathLike, out_dir: str | os.PathLike,
          config: ScoreConfig | None = None, checkpoint: str | None = None, step: int | None = None,
          pool: VerifierPool | None = None) -> dict:
    """Write ``{out_dir}/scores.jsonl`` and ``{out_dir}/summary.json``; return the summary.

    ``checkpoint`` defaults to the one in ``generation.json`` next to the generations; ``step`` to the
    ``step-N`` directory in the output or generations path. ``pool``: a math verifier pool to use (made
    with ``config``'s workers and timeout), so that a caller scoring several checkpoints in a loop starts
    its workers once (each loads the verifier); by default one is made for this call."""
    config = config or ScoreConfig()
    generations, benchmarks_dir, out_dir = Path(generations), Path(benchmarks_dir), Path(out_dir)
    if not generations.is_file():
        raise ValueError(f"generations file {generations} not found")
    problems, n = group_generations(generations, benchmarks_dir, config.allow_missing)
    for k in config.pass_ks:
        if not 1 <= k <= n:
            raise ValueError(f"pass@{k} needs 1 <= k <= n = {n} samples per problem")
    for problem in problems.values():
        problem.flags = [0] * n
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    math = [p for p in problems.values() if p.record["kind"] == "math"]
    code = [p for p in problems.values() if p.record["kind"] == "code"]
    meta = generations.parent / GENERATION_META_FILE
    generation = json.loads(meta.read_text()) if meta.is_file() else {}
    answer_format = config.answer_format or generation.get("config", {}).get("answer_format", DEFAULT_ANSWER_FORMAT)
    unparsable: dict[str, list[str]] = defaultdict(list)
    _score_math(math, config, counts, unparsable, answer_format, pool)
    sandbox_info = _score_code(code, config, counts) if code else None

    lines, per_benchmark = [], defaultdict(list)
    for (name, pid), problem in problems.items():
        truncated = [int(row["finish_reason"] == "length") for row in problem.samples]
        lines.append({"benchmark": name, "problem_id": pid, "correct": problem.flags, "truncated": truncated})
        per_benchmark[name].append((problem.flags, truncated))
    benchmarks = {}
    acc, best, best_bootstrap = eval_metrics(n)
    math_benchmarks = {problem.benchmark for problem in math}
    for name, rows in per_benchmark.items():
        metrics = benchmark_metrics([flags for flags, _ in rows], config.pass_ks)
        entry = {acc: metrics["acc"], best: metrics["best"], best_bootstrap: metrics["best_bootstrap"],
                 "n_problems": len(rows),
                 "n_samples": len(rows) * n,
                 "truncation_rate": sum(sum(t) for _, t in rows) / (len(rows) * n)}
        entry.update({pass_metric(k): metrics[pass_metric(k)] for k in config.pass_ks})
        entry.update(dict(counts.get(name, {})))
        if name in math_benchmarks:
            entry[UNPARSABLE_GOLDS] = len(unparsable.get(name, []))
            entry[UNPARSABLE_GOLD_IDS] = unparsable.get(name, [])
        benchmarks[name] = entry
    mean = {key: sum(b[key] for b in benchmarks.values()) / len(benchmarks) for key in (acc, best, best_bootstrap)}
    mean[UNPARSABLE_GOLDS] = sum(len(ids) for ids in unparsable.values())
    if checkpoint is None:
        checkpoint = generation.get("checkpoint")
    summary = {
        "checkpoint": checkpoint,
        "step": step if step is not None else step_of_path(out_dir, generations.parent),
        "n": n,
        "verifier": verifier_info(),
        "answer_format": answer_format,
        "benchmarks": benchmarks,
        "mean": mean,
    }
    if sandbox_info is not None:
        summary["code_sandbox"] = sandbox_info
    out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(out_dir / SCORES_FILE, lines)
    write_json(out_dir / SUMMARY_FILE, summary)
    return summary
