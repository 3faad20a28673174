"""The command line: ``python -m balagg``."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from balagg.cli import COMMAND_MODULES, build_parser, main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "balagg", *args], capture_output=True, text=True, timeout=120)


def test_help_lists_every_subcommand():
    result = run_cli("--help")
    assert result.returncode == 0
    for name in COMMAND_MODULES:
        assert name.replace("_", "-") in result.stdout


def test_weights_shows_sign_length_coupling(capsys):
    assert main(["weights", "--rewards", "1,1,0,0,0", "--lengths", "120,80,900,700,650"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split() and "-agg" in line.split()[0]}
    assert set(rows) >= {"seq-agg", "token-agg", "balanced-agg", "balanced-agg-mass"}
    # last column is pos/neg: balanced for seq and BA, tilted to the long negatives for token-agg
    assert float(rows["seq-agg"][-1]) == 1.0 and float(rows["balanced-agg"][-1]) == 1.0
    assert float(rows["token-agg"][-1]) < 0.2
    # BA gives both short positives the same token weight: (2/5)/200 per token = 2.000 per 1000 tokens
    assert rows["balanced-agg"][2:4] == ["2.000", "2.000"]


def test_weights_rejects_mismatched_input_with_a_clear_message():
    result = run_cli("weights", "--rewards", "1,0", "--lengths", "5,6,7")
    assert result.returncode == 2
    assert "got 2 rewards but 3 lengths" in result.stderr
    result = run_cli("weights", "--rewards", "1,x", "--lengths", "5,6")
    assert result.returncode == 2 and "comma-separated numbers" in result.stderr


def test_the_command_line_exits_as_python_would_but_without_module_teardown(tmp_path):
    """exit_without_teardown: the exit status, then what a normal exit does that a job relies on: a
    non-daemon thread finishes, atexit handlers run, buffered stdout and stderr reach the pipe."""
    script = f"""
import atexit, pathlib, sys, threading, time
from balagg.cli import exit_without_teardown
out = pathlib.Path({str(tmp_path)!r})
def late_writer():
    time.sleep(0.3)
    (out / "thread.txt").write_text("done")
threading.Thread(target=late_writer).start()
atexit.register(lambda: (out / "atexit.txt").write_text("ran"))
sys.stdout.write("buffered, no newline")
sys.stderr.write("also buffered")
exit_without_teardown(3)
raise AssertionError("not reached")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert result.stdout == "buffered, no newline" and result.stderr == "also buffered"
    assert (tmp_path / "thread.txt").read_text() == "done"
    assert (tmp_path / "atexit.txt").read_text() == "ran"


def test_python_m_balagg_keeps_its_exit_status_and_output(capsys):
    args = ("weights", "--rewards", "1,0,0", "--lengths", "10,20,30")
    ok = run_cli(*args)
    assert main(list(args)) == 0
    assert ok.returncode == 0 and ok.stdout == capsys.readouterr().out  # every line reached the pipe
    bad = run_cli("weights", "--rewards", "1,0", "--lengths", "5,6,7")
    assert bad.returncode == 2 and bad.stderr.startswith("error:")


def test_a_live_thread_pool_does_not_keep_the_finished_command_alive():
    """An idle ThreadPoolExecutor nobody shut down (vLLM and transformers keep some) ends as at Python's own
    exit: its worker threads are woken and joined, and the process exits within seconds."""
    script = """
from concurrent.futures import ThreadPoolExecutor
from balagg.cli import exit_without_teardown
pool = ThreadPoolExecutor(max_workers=2)
assert pool.submit(sum, [1, 2]).result() == 3  # the pool is live, its workers idle
exit_without_teardown(0)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def test_a_thread_that_never_ends_is_named_and_left_behind_after_the_grace():
    """A non-daemon thread still running after the grace period does not hold the finished job (and its
    GPUs) until the scheduler's time limit: it is named on stderr and the process exits with its status."""
    script = """
import threading
from balagg.cli import exit_without_teardown
threading.Thread(target=threading.Event().wait, name="stuck-engine-thread").start()
exit_without_teardown(4, thread_grace_s=1.0)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert result.returncode == 4
    assert "stuck-engine-thread" in result.stderr and "\n" not in result.stderr.strip()


def test_generate_has_one_flag_per_generation_setting_under_the_names_the_workflow_passes():
    """The flags are GenerationConfig's fields (balagg.config_flags): defaults, types, choices and the
    older spellings (--threads, --kv-cache-bytes) included."""
    from balagg.config_flags import config_from_args
    from balagg.evaluation.generation.requests import GenerationConfig

    generate = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["generate"]
    required = ["--checkpoint", "c", "--benchmarks-dir", "b", "--benchmarks", "math500", "--out", "o"]
    assert config_from_args(GenerationConfig, generate.parse_args(required)) == GenerationConfig()
    args = generate.parse_args([*required, "--n", "8", "--temperature", "0", "--top-p", "0.5", "--max-tokens", "9",
                                "--seed", "3", "--batch-size", "2", "--chat-template", "--enable-thinking",
                                "false", "--answer-format", "answer-line", "--max-position-embeddings", "64",
                                "--threads", "3", "--kv-cache-bytes", "5", "--enforce-eager"])
    assert config_from_args(GenerationConfig, args) == GenerationConfig(
        n=8, temperature=0.0, top_p=0.5, max_tokens=9, seed=3, batch_size=2, chat_template=True,
        enable_thinking=False, answer_format="answer-line", max_position_embeddings=64, num_threads=3,
        kv_cache_memory_bytes=5, enforce_eager=True)
    for bad in (["--enable-thinking", "maybe"], ["--backend", "tpu"], ["--n", "two"]):
        with pytest.raises(SystemExit):
            generate.parse_args([*required, *bad])
