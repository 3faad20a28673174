"""The verifier pool and the ``score`` stage: generations.jsonl -> scores.jsonl + summary.json."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from balagg.cli import main
from balagg.evaluation.verify.pool import VerifierPool
from balagg.evaluation.verify.sandbox import isolation_mode
from balagg.evaluation.scoring.score import ScoreConfig, score

sys.path.insert(0, str(Path(__file__).parent))  # scoring_stubs, for the pool's worker processes


def test_pool_times_out_one_sample_and_keeps_scoring_the_rest():
    pairs = [("a", "a"), ("hang", "x"), ("b", "c"), ("boom", "x"), ("d", "d"), ("e", "e")]
    start = time.monotonic()
    with VerifierPool(workers=2, timeout_s=1.0, verifier="scoring_stubs:slow_on_hang") as pool:
        result = pool.verify(pairs)
        again = pool.verify([("z", "z")])  # the replaced worker serves the next call
    assert result.verdicts == [True, False, False, False, True, True]
    assert result.timed_out == [1]
    assert list(result.errors) == [3] and "cannot read this" in result.errors[3]
    assert again.verdicts == [True]
    assert time.monotonic() - start < 30


def test_a_worker_killed_from_outside_costs_no_verdict_but_a_sample_that_kills_every_worker_fails(tmp_path):
    mark = str(tmp_path / "died")
    pairs = [("a", "x"), ("die", mark), ("b", "x"), ("die-always", "x"), ("c", "x")]
    with VerifierPool(workers=2, timeout_s=30.0, verifier="scoring_stubs:dies_once_on_die") as pool:
        result = pool.verify(pairs)
    assert Path(mark).exists()  # a worker did die on "die" ...
    assert result.verdicts == [True, True, True, False, True]  # ... and its retry gave the verdict
    assert list(result.errors) == [3] and "died twice" in result.errors[3]



def test_a_worker_killed_while_idle_is_replaced_when_it_is_next_given_a_sample():
    """Slurm's SIGTERM at a time limit reaches every process of the job, the verifier workers of a trainer
    included, between two reward batches: the next batch gets every verdict from fresh workers."""
    with VerifierPool(workers=2, timeout_s=30.0, verifier="scoring_stubs:slow_on_hang") as pool:
        assert pool.verify([("a", "a"), ("b", "b")]).verdicts == [True, True]
        for worker in pool._pool:
            os.kill(worker.process.pid, signal.SIGTERM)
            worker.process.join(timeout=10)
        result = pool.verify([("a", "a"), ("b", "c"), ("d", "d")])
        assert all(worker.process.is_alive() for worker in pool._pool)
    assert result.verdicts == [True, False, True] and not result.errors

def test_pool_runs_the_math_verifier():
    with VerifierPool(workers=2, timeout_s=10.0) as pool:
        result = pool.verify([("\\boxed{\\frac12}", "0.5"), ("\\boxed{3}", "4"), ("<think>\\boxed{4}", "4")])
    assert result.verdicts == [True, False, False]


POOL_SCRIPT = """
import os, signal, sys, threading, time
sys.path[:0] = [{tests!r}]
from balagg.evaluation.verify.pool import VerifierPool


def main():
    if "thread" in sys.argv:  # a second thread: forking is not safe
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: None)  # the parent's own handler (a trainer's, say)
    pool = VerifierPool(workers=1, timeout_s=10.0, verifier="scoring_stubs:slow_on_hang")
    pool.start()
    worker = pool._pool[0].process
    print(type(worker).__name__, worker.pid, pool.verify([("a", "a"), ("b", "c")]).verdicts, flush=True)
    if "wait" in sys.argv:
        time.sleep(60)
    pool.close()


if __name__ == "__main__":  # a spawned worker imports this file again
    main()
"""


def _pool_process(tmp_path, *args):
    script = tmp_path / "pool_script.py"
    script.write_text(POOL_SCRIPT.format(tests=str(Path(__file__).parent)))
    return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, text=True)


def _gone(pid, within_s=10.0):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as handle:  # a zombie waiting for its reaper is gone too
            if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")
@pytest.mark.parametrize("threads, started", [("", "ForkProcess"), ("thread", "SpawnProcess")])
def test_pool_forks_its_workers_only_while_the_process_has_one_thread(tmp_path, threads, started):
    process = _pool_process(tmp_path, threads)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0
    kind, _pid, verdicts = out.split(" ", 2)
    assert kind == started and verdicts.strip() == "[True, False]"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")
def test_a_forked_worker_dies_with_its_parent_and_of_sigterm(tmp_path):
    """A forked worker holds the parent's end of its own pipe, so only PR_SET_PDEATHSIG ends it when the
    parent is killed; and it must not keep the parent's SIGTERM handler."""
    for kill in ("parent", "worker"):
        process = _pool_process(tmp_path, "wait")
        kind, pid, _ = process.stdout.readline().split(" ", 2)
        assert kind == "ForkProcess"
        if kill == "parent":
            process.kill()
            process.wait()
        else:
            os.kill(int(pid), signal.SIGTERM)
        assert _gone(int(pid)), "the worker outlived a SIGKILL of its parent" if kill == "parent" else (
            "the worker ignored SIGTERM (the parent's handler)")
        process.kill()
        process.wait()


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _gen(benchmark, pid, sample, text, reason="stop"):
    return {"benchmark": benchmark, "problem_id": pid, "sample": sample, "seed": 1000 + sample, "text": text,
            "finish_reason": reason, "num_tokens": len(text)}


@pytest.fixture
def math_case(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    _write_jsonl(bench / "math500.jsonl", [
        {"id": "m-0", "benchmark": "math500", "kind": "math", "problem": "?", "answer": "\\frac{1}{2}"},
        {"id": "m-1", "benchmark": "math500", "kind": "math", "problem": "?", "answer": "7"},
        {"id": "m-2", "benchmark": "math500", "kind": "math", "problem": "?", "answer": "x=3"}])
    _write_jsonl(bench / "olympiadbench.jsonl", [
        {"id": "o-0", "benchmark": "olympiadbench", "kind": "math", "problem": "?", "answer": ["3", "5"]}])
    texts = {"m-0": ["\\boxed{0.5}"] * 4,                                  # 4/4
             "m-1": ["\\boxed{7}", "\\boxed{8}", "no idea", "<think>\\boxed{7}"],  # 1/4, one truncated think
             "m-2": ["\\boxed{4}"] * 4,                                    # 0/4
             "o-0": ["\\boxed{5, 3}", "\\boxed{3}", "\\boxed{3}", "\\boxed{3}"]}   # 1/4
    rows = [_gen("olympiadbench" if pid.startswith("o") else "math500", pid, s, text,
                 "length" if pid == "m-1" and s == 3 else "stop")
            for pid, samples in texts.items() for s, text in enumerate(samples)]
    run_dir = tmp_path / "eval" / "step-000040"
    run_dir.mkdir(parents=True)
    generations = _write_jsonl(run_dir / "generations.jsonl", rows[::-1])  # order must not matter
    (run_dir / "generation.json").write_text(json.dumps({"checkpoint": "/ckpt/step-000040"}))
    return generations, bench, run_dir


def test_score_math_writes_the_contract_files(math_case):
    generations, bench, out = math_case
    summary = score(generations, bench, out, ScoreConfig(workers=2, pass_ks=(1, 2)))
    lines = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert [(l["benchmark"], l["problem_id"]) for l in lines] == [
        ("math500", "m-0"), ("math500", "m-1"), ("math500", "m-2"), ("olympiadbench", "o-0")]
    assert lines[1] == {"benchmark": "math500", "problem_id": "m-1", "correct": [1, 0, 0, 0],
                        "truncated": [0, 0, 0, 1]}
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk == summary
    assert summary["checkpoint"] == "/ckpt/step-000040" and summary["step"] == 40 and summary["n"] == 4
    assert summary["verifier"]["name"] == "math-verify" and summary["verifier"]["version"] == "0.5.2"
    m = summary["benchmarks"]["math500"]
    assert m["acc@4"] == pytest.approx((4 / 4 + 1 / 4 + 0) / 3)
    assert m["best@4"] == pytest.approx(2 / 3)
    assert m["pass@1"] == pytest.approx(m["acc@4"])
    assert m["pass@2"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert (m["n_problems"], m["n_samples"], m["truncation_rate"]) == (3, 12, pytest.approx(1 / 12))
    o = summary["benchmarks"]["olympiadbench"]
    assert (o["acc@4"], o["best@4"]) == (0.25, 1.0)
    assert summary["mean"]["acc@4"] == pytest.approx((m["acc@4"] + o["acc@4"]) / 2)
    assert summary["mean"]["best@4"] == pytest.approx((m["best@4"] + 1.0) / 2)
    # verl's bootstrap best@4 from the per-sample flags on disk, per benchmark and in the mean
    from test_metrics import verl_best_at_n_mean

    flags = {name: [l["correct"] for l in lines if l["benchmark"] == name] for name in ("math500", "olympiadbench")}
    assert m["best@4_bootstrap"] == verl_best_at_n_mean(flags["math500"]) < m["best@4"]  # m-1: 1 of 4
    assert o["best@4_bootstrap"] == verl_best_at_n_mean(flags["olympiadbench"])
    assert summary["mean"]["best@4_bootstrap"] == pytest.approx((m["best@4_bootstrap"] + o["best@4_bootstrap"]) / 2)


def test_score_refuses_bad_input(math_case, tmp_path):
    generations, bench, out = math_case
    with pytest.raises(ValueError, match="pass@5"):
        score(generations, bench, out, ScoreConfig(pass_ks=(5,)))
    rows = [json.loads(line) for line in generations.read_text().splitlines()]
    ragged = _write_jsonl(tmp_path / "ragged.jsonl", [r for r in rows if not (r["problem_id"] == "m-0" and r["sample"] == 3)])
    with pytest.raises(ValueError, match="same number"):
        score(ragged, bench, tmp_path / "o1")
    gap = _write_jsonl(tmp_path / "gap.jsonl", [dict(r, sample=9) if (r["problem_id"], r["sample"]) == ("m-0", 3) else r for r in rows])
    with pytest.raises(ValueError, match="m-0: sample indices"):
        score(gap, bench, tmp_path / "o2")
    unknown = _write_jsonl(tmp_path / "unknown.jsonl", rows + [_gen("math500", "m-99", 0, "x")])
    with pytest.raises(ValueError, match="m-99 is not in benchmark math500"):
        score(unknown, bench, tmp_path / "o3")
    partial = _write_jsonl(tmp_path / "partial.jsonl", [r for r in rows if r["problem_id"] != "m-2"])
    with pytest.raises(ValueError, match="have no generations"):
        score(partial, bench, tmp_path / "o4")
    summary = score(partial, bench, tmp_path / "o5", ScoreConfig(allow_missing=True))
    assert summary["benchmarks"]["math500"]["n_problems"] == 2
    assert not (tmp_path / "o1").exists()  # nothing half-written on failure


def test_an_unparsable_gold_scores_its_problem_incorrect_counts_it_and_stops_nothing(math_case, capsys):
    """MATH-500 and Minerva golds as real rows carry them: an escaped dollar (read as the amount), stray
    delimiters (read without them) and a gold with nothing to compare with (lighteval's rule: every
    sample incorrect). The run goes on, counts and names it; strict_golds makes it an error."""
    generations, bench, out = math_case
    records = [json.loads(line) for line in (bench / "math500.jsonl").read_text().splitlines()]
    records[0]["answer"] = "\\$0.50"                  # m-0: answered \boxed{0.5}
    records[1]["answer"] = "7+$ $0"                     # m-1: answered \boxed{7} once
    records[2]["answer"] = "\\text{}"                  # m-2: nothing to compare with
    _write_jsonl(bench / "math500.jsonl", records)
    summary = score(generations, bench, out, ScoreConfig(workers=2))
    lines = {l["problem_id"]: l["correct"] for l in map(json.loads, (out / "scores.jsonl").read_text().splitlines())}
    assert lines == {"m-0": [1, 1, 1, 1], "m-1": [1, 0, 0, 0], "m-2": [0, 0, 0, 0], "o-0": [1, 0, 0, 0]}
    m = summary["benchmarks"]["math500"]
    assert (m["unparsable_golds"], m["unparsable_gold_ids"], m["n_problems"]) == (1, ["m-2"], 3)
    assert summary["benchmarks"]["olympiadbench"]["unparsable_golds"] == 0
    assert summary["mean"]["unparsable_golds"] == 1
    with pytest.raises(ValueError, match=r"math500/m-2: gold answer .* \(strict_golds\)"):
        score(generations, bench, out.parent / "strict", ScoreConfig(workers=2, strict_golds=True))
    assert main(["score", "--generations", str(generations), "--benchmarks-dir", str(bench), "--out",
                 str(out.parent / "cli")]) == 0
    assert "unparsable gold answers, scored incorrect (--strict-golds to stop at them): math500 1 (m-2)" \
        in capsys.readouterr().err
    assert main(["score", "--generations", str(generations), "--benchmarks-dir", str(bench), "--out",
                 str(out.parent / "cli-strict"), "--strict-golds"]) == 2
    assert "m-2" in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.skipif(isolation_mode() != "namespaces", reason="the code sandbox needs root and unshare")
def test_score_code_and_cli(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    _write_jsonl(bench / "livecodebench.jsonl", [
        {"id": "lcb-add", "benchmark": "livecodebench", "kind": "code", "problem": "?", "starter_code": "",
         "fn_name": None, "tests": [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
                                    {"input": "2 2\n", "output": "4\n", "testtype": "stdin"}]},
        {"id": "lcb-twice", "benchmark": "livecodebench", "kind": "code", "problem": "?",
         "starter_code": "class Solution:\n    def twice(self, x: int) -> int:\n", "fn_name": "twice",
         "tests": [{"input": "3", "output": "6", "testtype": "functional"}]}])
    good_add = "<think>easy</think>```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    rows = [_gen("livecodebench", "lcb-add", 0, good_add),
            _gen("livecodebench", "lcb-add", 1, "```python\nwhile True:\n    pass\n```"),
            _gen("livecodebench", "lcb-add", 2, "no code at all"),
            _gen("livecodebench", "lcb-twice", 0, "```python\nclass Solution:\n    def twice(self, x):\n        return 2 * x\n```"),
            _gen("livecodebench", "lcb-twice", 1, "```python\nimport os\nos.kill(os.getppid(), 9)\n```"),
            _gen("livecodebench", "lcb-twice", 2, "<think>```python\nclass Solution:\n    def twice(self, x):\n        return 2 * x\n```")]
    generations = _write_jsonl(tmp_path / "generations.jsonl", rows)
    out = tmp_path / "scored"
    assert main(["score", "--generations", str(generations), "--benchmarks-dir", str(bench), "--out", str(out),
                 "--code-timeout", "1", "--step", "7", "--checkpoint", "ck"]) == 0
    lines = {l["problem_id"]: l for l in map(json.loads, (out / "scores.jsonl").read_text().splitlines())}
    assert lines["lcb-add"]["correct"] == [1, 0, 0]
    assert lines["lcb-twice"]["correct"] == [1, 0, 0]
    summary = json.loads((out / "summary.json").read_text())
    entry = summary["benchmarks"]["livecodebench"]
    assert (entry["acc@3"], entry["best@3"], entry["no_code"]) == (pytest.approx(1 / 3), 1.0, 2)  # no block; block only inside unclosed think
    assert summary["code_sandbox"]["isolation"] == "namespaces" and summary["step"] == 7


def test_cli_reports_bad_input_as_one_line(tmp_path, capsys):
    assert main(["score", "--generations", str(tmp_path / "none.jsonl"), "--benchmarks-dir", str(tmp_path),
                 "--out", str(tmp_path / "o")]) == 2
    assert "not found" in capsys.readouterr().err


def test_pool_kills_a_pathological_math_answer():
    """9^9^9^9 keeps sympy busy for seconds; the pool's deadline ends it and scores the others."""
    pairs = [("\\boxed{1}", "1"), ("\\boxed{9^{9^{9^{9}}}}", "5"), ("\\boxed{2}", "2")]
    with VerifierPool(workers=1, timeout_s=1.5) as pool:
        result = pool.verify(pairs)
    assert result.verdicts == [True, False, True]
    assert result.timed_out == [1]
