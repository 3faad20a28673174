"""The local fork server (balagg.jobserver): a job run through it is the job run in its own process.

Each test starts ``python -m balagg jobserver`` around a small shell script that plays Snakemake's part
(its thread variables set to 1, as Snakemake sets them for a one-thread job), and reads the server's
log to know which jobs it served. Most preload only ``json`` (the contract does not depend on what is
preloaded); one preloads the real stack, to show that it leaves the server fork-safe.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from balagg.jobserver import SOCKET_ENV
from balagg.jobserver.server import PRELOAD, THREAD_ENV, import_time_env, refusal

ONE_THREAD = {name: "1" for name in THREAD_ENV}
WEIGHTS = "weights --rewards 1,0,0,1,0,1,0,0 --lengths 10,30,50,20,40,60,30,90 --groups 0,0,0,0,1,1,1,1"


def environment(**extra: str) -> dict:
    env = {key: value for key, value in os.environ.items() if key != SOCKET_ENV}
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else src
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env | ONE_THREAD | extra


def serve(script: str, tmp_path: Path, *, preload: str = "json", timeout: float = 120) -> tuple[subprocess.CompletedProcess, str]:
    """Run ``bash -c script`` under a job server in ``tmp_path``; (the run, the server's log)."""
    log = tmp_path / "jobserver.log"
    run = subprocess.run([sys.executable, "-m", "balagg", "jobserver", "--log", str(log), "--preload", preload,
                          "--", "bash", "-c", script], cwd=tmp_path, env=environment(), capture_output=True,
                         text=True, timeout=timeout)
    return run, log.read_text() if log.exists() else ""


def served(log: str) -> list[str]:
    return re.findall(r"job \d+ ended \((-?\d+)\)", log)


def test_a_served_job_prints_and_exits_as_the_same_job_run_alone(tmp_path):
    script = (f"python -m balagg {WEIGHTS} > served.out 2> served.err; echo $? > served.rc; "
              f"env -u {SOCKET_ENV} python -m balagg {WEIGHTS} > alone.out 2> alone.err; echo $? > alone.rc; "
              "python -m balagg results --campaign-dir missing > bad.out 2> bad.err; echo $? > bad.rc; "
              f"env -u {SOCKET_ENV} python -m balagg results --campaign-dir missing 2> bad-alone.err; echo $? > bad-alone.rc")
    run, log = serve(script, tmp_path)
    assert run.returncode == 0, run.stderr
    assert served(log) == ["0", "2"], log
    assert (tmp_path / "served.out").read_text() == (tmp_path / "alone.out").read_text() != ""
    assert (tmp_path / "served.rc").read_text() == (tmp_path / "alone.rc").read_text() == "0\n"
    assert (tmp_path / "bad.rc").read_text() == (tmp_path / "bad-alone.rc").read_text() == "2\n"
    assert (tmp_path / "bad.err").read_text() == (tmp_path / "bad-alone.err").read_text()
    assert "missing" in (tmp_path / "bad.err").read_text()


def test_the_job_gets_the_clients_directory_and_arguments(tmp_path):
    (tmp_path / "sub").mkdir()
    script = "cd sub && python -m balagg results --campaign-dir . 2> err; echo $? > rc"
    run, log = serve(script, tmp_path)
    assert served(log) == ["2"], log
    # the relative path was resolved in the client's directory, not the server's
    assert "analysis/table1.md not found" in (tmp_path / "sub" / "err").read_text()


def test_a_job_whose_import_time_environment_differs_runs_in_its_own_process(tmp_path):
    script = f"OMP_NUM_THREADS=2 python -m balagg {WEIGHTS} > out; echo $? > rc"
    run, log = serve(script, tmp_path)
    assert run.returncode == 0, run.stderr
    assert served(log) == [] and "refused (environment differs in OMP_NUM_THREADS)" in log
    assert (tmp_path / "rc").read_text() == "0\n" and "balanced-agg" in (tmp_path / "out").read_text()


def test_refusal_names_the_differing_variables_and_the_interpreter():
    server = import_time_env({"OMP_NUM_THREADS": "1", "HOME": "/a", "HF_HUB_OFFLINE": "1"})
    assert server == {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    same = {"executable": sys.executable, "env": {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HOME": "/b",
                                                  SOCKET_ENV: "/x"}}
    assert refusal(same, server) is None
    assert "SLURM_JOB_ID" in refusal(same | {"env": same["env"] | {"SLURM_JOB_ID": "7"}}, server)
    assert "HF_HUB_OFFLINE" in refusal(same | {"env": {"OMP_NUM_THREADS": "1"}}, server)
    assert "interpreter" in refusal(same | {"executable": "/usr/bin/python0"}, server)
    # what the server's imports set (torch: KMP_*) counts as the client's when it has none, and a job
    # started by a served job, which has it, is served too; another value is not
    imports = {"KMP_INIT_AT_FORK": "FALSE"}
    after = server | imports
    assert refusal(same, after, None, imports) is None
    assert refusal(same | {"env": same["env"] | imports}, after, None, imports) is None
    assert "KMP_INIT_AT_FORK" in refusal(same | {"env": same["env"] | {"KMP_INIT_AT_FORK": "TRUE"}}, after, None, imports)


def test_without_a_listening_server_the_client_runs_the_job_itself(tmp_path):
    run = subprocess.run([sys.executable, "-m", "balagg", *WEIGHTS.split()], cwd=tmp_path, capture_output=True,
                         text=True, env=environment(**{SOCKET_ENV: str(tmp_path / "no-socket")}), timeout=120)
    assert run.returncode == 0 and "balanced-agg" in run.stdout, run.stderr


def _started_job(log_path: Path, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.search(r"job (\d+) started", log_path.read_text() if log_path.exists() else "")
        if match:
            return int(match.group(1))
        time.sleep(0.05)
    raise AssertionError(f"no job started: {log_path.read_text() if log_path.exists() else 'no log'}")


def _gone(pid: int, timeout: float = 30) -> bool:
    """Whether `pid` has ended (or is a zombie) within `timeout` s: generous, as on a loaded machine the
    server, the client and the job each wait for a core."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or "State:\tZ" in Path(f"/proc/{pid}/status").read_text():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("target, signum, expected", [("client", signal.SIGKILL, "137"),
                                                     ("client", signal.SIGTERM, "143"),
                                                     ("job", signal.SIGKILL, "137")])
def test_a_signal_ends_the_job_and_its_client_together(tmp_path, target, signum, expected):
    """kill -9 of the client: the server kills the job; SIGTERM to the client: passed on, and the
    client dies of it too; kill -9 of the job itself: its client dies of SIGKILL, as the job would
    have without the server (what Snakemake sees is the same)."""
    os.mkfifo(tmp_path / "never-written")  # the job blocks opening it, until killed
    log = tmp_path / "jobserver.log"
    script = ("python -m balagg curve --out curve.csv never-written & echo $! > client.pid; "
              "wait $!; echo $? > client.rc")
    server = subprocess.Popen([sys.executable, "-m", "balagg", "jobserver", "--log", str(log), "--preload", "json",
                               "--", "bash", "-c", script], cwd=tmp_path, env=environment())
    try:
        job = _started_job(log)
        client = int((tmp_path / "client.pid").read_text())
        assert Path(f"/proc/{job}").exists() and not _gone(job, timeout=0.5)
        os.kill(client if target == "client" else job, signum)
        assert _gone(job), "the job outlived its client"
        assert _gone(client), "the client outlived its job"
        assert server.wait(timeout=30) == 0
        assert (tmp_path / "client.rc").read_text().strip() == expected
        assert not (tmp_path / "curve.csv").exists()
    finally:
        server.kill()


def test_the_real_preload_leaves_the_server_able_to_fork(tmp_path):
    """torch, transformers, TRL and MLflow imported, no thread started: the job is served."""
    script = f"python -m balagg {WEIGHTS} > out"
    run, log = serve(script, tmp_path, preload=",".join(PRELOAD), timeout=300)
    assert run.returncode == 0, run.stderr
    assert "torch" in log and "transformers" in log and served(log) == ["0"], log
    assert "balanced-agg" in (tmp_path / "out").read_text()


def test_a_job_runs_the_balagg_on_its_own_sys_path_not_the_servers(tmp_path):
    """As a workflow tree with its own src/ (the chaos test's trees): the job imports that copy."""
    import shutil

    tree = tmp_path / "tree" / "src"
    shutil.copytree(Path(__file__).resolve().parents[1] / "src" / "balagg", tree / "balagg",
                    ignore=shutil.ignore_patterns("__pycache__"))
    init = tree / "balagg" / "__init__.py"
    init.write_text(re.sub(r'__version__ = "[^"]*"', '__version__ = "9.9.9-tree"', init.read_text()))
    script = f"PYTHONPATH={tree}:$PYTHONPATH python -m balagg --version > version"
    run, log = serve(script, tmp_path)
    assert served(log) == ["0"], log
    assert (tmp_path / "version").read_text().strip() == "balagg 9.9.9-tree"


def test_a_job_whose_sys_path_finds_a_preloaded_package_elsewhere_is_refused(tmp_path):
    """(``wave``: preloaded by the server, never imported by the client itself.)"""
    shadow = tmp_path / "shadow" / "wave"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    script = f"PYTHONPATH={shadow.parent}:$PYTHONPATH python -m balagg --version > version; echo $? > rc"
    run, log = serve(script, tmp_path, preload="json,wave")
    assert served(log) == [] and f"finds wave elsewhere ({shadow / '__init__.py'})" in log, log
    assert (tmp_path / "rc").read_text() == "0\n" and "balagg" in (tmp_path / "version").read_text()


def test_a_command_that_ends_during_the_preload_ends_the_server_without_the_rest_of_it(tmp_path):
    """A second `make demo` with nothing to do must not wait for torch, transformers, TRL and MLflow."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "slow_first.py").write_text("import time\ntime.sleep(2)\n")
    (modules / "never_reached.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    log = tmp_path / "jobserver.log"
    env = environment(PYTHONPATH=f"{modules}{os.pathsep}{environment()['PYTHONPATH']}")
    run = subprocess.run([sys.executable, "-m", "balagg", "jobserver", "--log", str(log), "--preload",
                          "slow_first,never_reached", "--", "true"], cwd=tmp_path, env=env, timeout=60)
    assert run.returncode == 0
    assert "command ended (0) during the preload" in log.read_text()
    assert not (tmp_path / "imported").exists()


def _slow_preload(tmp_path: Path, body: str) -> dict:
    """An environment whose PYTHONPATH has a module ``slow_preload`` that sleeps 1 s and runs ``body``."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "slow_preload.py").write_text(f"import time\ntime.sleep(1)\n{body}\n")
    return environment(PYTHONPATH=f"{modules}{os.pathsep}{environment()['PYTHONPATH']}")


def test_a_job_started_during_the_preload_waits_for_it_and_is_served(tmp_path):
    """The first jobs of a run (the warm starts, the longest) start while the server still imports:
    they wait for it instead of importing everything again in their own processes."""
    log = tmp_path / "jobserver.log"
    run = subprocess.run([sys.executable, "-m", "balagg", "jobserver", "--log", str(log), "--preload", "slow_preload",
                          "--", "bash", "-c", f"python -m balagg {WEIGHTS} > out"], cwd=tmp_path,
                         env=_slow_preload(tmp_path, ""), timeout=120)
    assert run.returncode == 0
    assert served(log.read_text()) == ["0"]
    assert "balanced-agg" in (tmp_path / "out").read_text()


def test_a_job_queued_behind_a_preload_that_cannot_serve_runs_once_in_its_own_process(tmp_path):
    """A preload that leaves a thread running makes forking unsafe: the job waiting for it is refused
    and runs itself, once; a job started after that finds no server."""
    log = tmp_path / "jobserver.log"
    thread = "import threading\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()"
    script = (f"python -m balagg {WEIGHTS} >> out; python -m balagg {WEIGHTS} >> out")
    run = subprocess.run([sys.executable, "-m", "balagg", "jobserver", "--log", str(log), "--preload", "slow_preload",
                          "--", "bash", "-c", script], cwd=tmp_path, env=_slow_preload(tmp_path, thread), timeout=120)
    assert run.returncode == 0
    assert "forking is unsafe" in log.read_text() and served(log.read_text()) == []
    alone = subprocess.run([sys.executable, "-m", "balagg", *WEIGHTS.split()], env=environment(), capture_output=True,
                           text=True, check=True).stdout
    assert (tmp_path / "out").read_text() == alone * 2  # each job ran exactly once


def test_a_server_that_cannot_listen_still_runs_the_command_and_its_jobs(tmp_path):
    """A socket path too long for AF_UNIX (a deep TMPDIR): no server, the same results, a line in its log."""
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    log = tmp_path / "jobserver.log"
    run = subprocess.run([sys.executable, "-m", "balagg", "jobserver", "--log", str(log), "--preload", "json", "--",
                          "bash", "-c", f"python -m balagg {WEIGHTS} > out; exit 3"], cwd=tmp_path,
                         env=environment(TMPDIR=str(deep)), timeout=120)
    assert run.returncode == 3  # the command's own status
    assert "cannot listen" in log.read_text() and served(log.read_text()) == []
    assert "balanced-agg" in (tmp_path / "out").read_text()


def test_a_server_that_goes_away_without_answering_fails_the_job_instead_of_running_it_again(tmp_path):
    """It may have forked the job already: running it here as well could do it twice."""
    import socket
    import threading

    path = str(tmp_path / "mute.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def take_and_hang_up():
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.close()

    thread = threading.Thread(target=take_and_hang_up, daemon=True)
    thread.start()
    run = subprocess.run([sys.executable, "-m", "balagg", *WEIGHTS.split()], cwd=tmp_path, capture_output=True,
                         text=True, env=environment(**{SOCKET_ENV: path}), timeout=120)
    listener.close()
    assert run.returncode == 1 and "went away before answering" in run.stderr
    assert "balanced-agg" not in run.stdout


def test_clients_still_queued_when_the_command_ends_are_refused_and_run_their_jobs_themselves(tmp_path):
    import socket

    from balagg.jobserver.protocol import receive, send
    from balagg.jobserver.server import _refuse_waiting

    path = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(4)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    send(client, {"argv": ["balagg", "curve"], "fds": [0, 1, 2]}, [0, 1, 2])
    _refuse_waiting(listener, "the command has ended")
    reply, _ = receive(client)
    assert reply == {"refused": "the command has ended"}
    listener.close()


def test_a_command_that_cannot_start_leaves_no_socket_behind(tmp_path, monkeypatch):
    from balagg.jobserver.server import serve as serve_command

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with pytest.raises(FileNotFoundError):
        serve_command([str(tmp_path / "no-such-command")])
    assert list(tmp_path.iterdir()) == []


def test_a_command_run_without_a_server_loads_none_of_its_code(tmp_path):
    """Without ``SOCKET_ENV`` set, ``python -m balagg`` reads one constant from the package and imports
    neither the client nor the server: the job server is not a step that every command passes through."""
    probe = ("import atexit, runpy, sys\n"
             "def report():\n"
             "    package = sys.modules.get('balagg.jobserver')\n"
             "    code = sorted(n for n, v in vars(package).items() if callable(v) and not n.startswith('_'))\n"
             "    print(sorted(m for m in sys.modules if m.startswith('balagg.jobserver')), code, file=sys.stderr)\n"
             "atexit.register(report)\n"
             "sys.argv = ['balagg', 'curve', '--help']\n"
             "runpy.run_module('balagg', run_name='__main__')\n")
    env = {k: v for k, v in os.environ.items() if k != SOCKET_ENV}
    run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr.strip().splitlines()[-1] == "['balagg.jobserver'] []"
