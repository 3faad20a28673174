"""The server side: ``python -m balagg jobserver -- COMMAND`` imports the heavy stack once, runs COMMAND
with :data:`SOCKET_ENV` set, and forks one child per job a client offers (see :mod:`balagg.jobserver`)."""

from __future__ import annotations

import gc
import importlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from balagg.errors import exit_status
from balagg.jobserver import SOCKET_ENV
from balagg.jobserver.protocol import MAX_FDS, all_fds, receive, send


PRELOAD: tuple[str, ...] = (
    "torch",
    "transformers",
    "transformers.models.qwen2.modeling_qwen2",
    "transformers.generation.utils",
    "transformers.trainer",
    "accelerate",
    "datasets",
    "trl",
    "trl.trainer.grpo_trainer",
    "mlflow",
    "mlflow.store.tracking.sqlalchemy_store",
    "pandas",
    "math_verify",
)
"""Modules imported before the first fork: what the train, generate, score and track commands import
before their first useful work (bench/startup.py), and MLflow's SQLAlchemy store, which MLflow imports
only when a job first opens the tracking database (SQLAlchemy, Alembic and MLflow's tables, otherwise
imported again by each train and track job). One that is not installed is skipped."""

THREAD_ENV: tuple[str, ...] = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                               "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
"""What Snakemake sets to a job's ``threads`` for every shell command; the server imports with 1."""

IMPORT_TIME_ENV: tuple[str, ...] = (
    "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "TORCH", "PYTORCH_", "CUDA_", "NCCL_", "OMP_",
    "MKL_", "KMP_", "OPENBLAS_", "GOTO_", "VECLIB_", "NUMEXPR_", "MLFLOW_", "VLLM_", "ACCELERATE_", "TRL_",
    "PYTHON", "LD_", "SLURM_",
)
"""Prefixes of environment variables that a preloaded package may read once, when it is imported; a
job whose values differ from the server's runs in its own process instead. ``PYTHONPATH`` is not
compared (every rule sets it to the checkout's src/): the job gets the client's ``sys.path``, its
own copy of balagg, and a preloaded package only if the job's ``sys.path`` finds it where the server did."""

UNCOMPARED_ENV: tuple[str, ...] = (SOCKET_ENV, "PYTHONPATH")

def import_time_env(environ) -> dict[str, str]:
    """The variables of ``environ`` that :data:`IMPORT_TIME_ENV` names, but :data:`UNCOMPARED_ENV`."""
    return {key: value for key, value in environ.items()
            if key.startswith(IMPORT_TIME_ENV) and key not in UNCOMPARED_ENV}



@dataclass
class _Job:
    pid: int
    argv: list[str]
    started: float = field(default_factory=time.monotonic)


def preload(modules: tuple[str, ...] = PRELOAD, stop=lambda: False) -> list[str]:
    """Import ``modules`` with one thread per library (as Snakemake's jobs have); the ones imported.

    ``stop()`` is asked before each import; once it is true the rest is skipped (the command ended)."""
    for name in THREAD_ENV:
        os.environ[name] = "1"
    imported = []
    for name in modules:
        if stop():
            break
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - not installed, or broken: the jobs that need it import it themselves
            continue
        imported.append(name)
    gc.collect()
    gc.freeze()  # the preloaded objects stay out of the children's collections: fewer copied pages
    return imported


def preloaded_origins() -> dict[str, str]:
    """Where each imported top-level module (balagg aside) was found on ``sys.path``: ``{name: file}``
    (extension modules that a package registers under a top-level name are not looked up by it)."""
    from importlib.machinery import PathFinder

    origins = {}
    for name, module in list(sys.modules.items()):
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        if "." in name or name == "balagg" or not origin or not os.path.isabs(origin):
            continue
        spec = PathFinder.find_spec(name, sys.path)
        if spec is not None and spec.origin == origin:
            origins[name] = origin
    return origins


def refusal(request: dict, server_env: dict[str, str], origins: dict[str, str] | None = None,
            set_by_imports: dict[str, str] | None = None) -> str | None:
    """Why the server cannot run ``request`` as the client would have run it; ``None`` if it can.

    ``server_env``: the server's :func:`import_time_env` after its imports, which may have set some
    variables (``set_by_imports``: torch sets ``KMP_*``, ``TORCHINDUCTOR_CACHE_DIR``) as they would in
    the client, so those count as the client's where it has none (a job started by a served job has
    them). ``origins`` (:func:`preloaded_origins`): each must be where the job's ``sys.path`` finds it."""
    set_by_imports = set_by_imports or {}
    if request.get("executable") != sys.executable:
        return f"another interpreter ({request.get('executable')})"
    differing = sorted(set(import_time_env(set_by_imports | request["env"]).items()) ^ set(server_env.items()))
    if differing:
        return "environment differs in " + ", ".join(sorted({key for key, _ in differing}))
    if origins and request.get("path") != sys.path:
        from importlib.machinery import PathFinder

        for name, origin in origins.items():
            spec = PathFinder.find_spec(name, request["path"])
            if spec is None or spec.origin != origin:
                return f"the job's sys.path finds {name} elsewhere ({spec.origin if spec else 'nowhere'})"
    return None


def serve(command: list[str], *, log: str | os.PathLike | None = None, modules: tuple[str, ...] = PRELOAD) -> int:
    """Run ``command`` with :data:`SOCKET_ENV` pointing at a fork server; return its exit status.

    ``log``: a file (its folder made if needed) that gets one line per job started, refused and ended,
    with the job's wall and CPU seconds (``wait4``'s usage of the job and what it waited for).

    The server listens before ``command`` starts and preloads ``modules`` while it starts; a job that
    connects during the preload waits for it (the first jobs of a run are its longest: the warm starts),
    and is refused, so it runs in its own process, if the server cannot serve after all (the command
    ended, or the preload started a thread). When ``command`` ends, the server stops taking jobs, waits for
    the ones running (as jobs left by a killed Snakemake go on) and returns ``command``'s status.
    SIGINT is left to ``command`` (Ctrl-C reaches it from the terminal); SIGTERM and SIGHUP are passed on;
    if the server itself is killed, ``command`` gets SIGTERM (Linux) and the running jobs are killed by
    their clients, which see the server go.
    """
    if log is not None:
        os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
        log = open(log, "a")

    def note(message: str) -> None:
        if log is not None:
            print(f"{time.strftime('%H:%M:%S')} jobserver: {message}", file=log, flush=True)

    try:
        folder = tempfile.mkdtemp(prefix="balagg-jobs-")
    except OSError as error:  # the server only saves time: without it, every job runs in its own process
        print(f"balagg jobserver: no socket folder ({error}); running the command without a job server",
              file=sys.stderr)
        return exit_status(subprocess.call(command))
    path = os.path.join(folder, "socket")
    child_env = dict(os.environ) | {SOCKET_ENV: path}
    listener, listen_error = _listen(path)
    from balagg.processes import die_with_parent

    # command gets SIGTERM if the server dies (kill -9): Snakemake then stops its jobs as on Ctrl-C
    try:
        process = subprocess.Popen(command, env=child_env, preexec_fn=lambda: die_with_parent(signal.SIGTERM))
    except OSError:  # no such command, say: leave no socket behind
        if listener is not None:
            listener.close()
            os.unlink(path)
        os.rmdir(folder)
        raise
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda signum, _frame: process.send_signal(signum))
    try:
        if listener is None:  # a socket path too long for AF_UNIX, say: the jobs run in their own processes
            note(f"cannot listen on {path} ({listen_error}); serving no jobs")
            return exit_status(process.wait())
        started = time.monotonic()
        before = dict(os.environ) | {name: "1" for name in THREAD_ENV}
        imported = preload(modules, stop=lambda: process.poll() is not None)
        if process.poll() is not None:  # nothing left to serve (a second `make demo` with nothing to do)
            note(f"command ended ({process.returncode}) during the preload; no job served")
            _refuse_waiting(listener, "the command has ended")
            return exit_status(process.returncode)
        set_by_imports = {key: value for key, value in os.environ.items() if key not in before}
        server_env = import_time_env(before | set_by_imports)
        origins = preloaded_origins()
        if threading.active_count() != 1:
            note(f"preloading started {threading.active_count() - 1} thread(s): forking is unsafe, serving no jobs")
            _refuse_waiting(listener, "the server cannot fork")
            listener.close()
            os.unlink(path)  # later jobs find no server and run in their own processes at once
            listener = None
            return exit_status(process.wait())
        note(f"preloaded {', '.join(imported)} in {time.monotonic() - started:.1f} s; serving on {path}")
        try:
            return exit_status(_serve_until(process, listener, (server_env, origins, set_by_imports),
                                            set_by_imports, note))
        except Exception:  # noqa: BLE001 - a bug here must not orphan the command: stop serving, wait for it
            import traceback

            note("stopped serving after an error:\n" + traceback.format_exc())
            listener.close()
            return exit_status(process.wait())
    finally:
        if listener is not None:
            listener.close()
        for name in (path, folder):
            try:
                os.rmdir(name) if name == folder else os.unlink(name)
            except OSError:
                pass


def _listen(path: str) -> tuple[socket.socket | None, OSError | None]:
    """A Unix socket listening at ``path`` (it appears there only once listening, so a client never
    finds it half-made), or ``None`` and the error."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path + ".new")
        listener.listen(64)
        os.rename(path + ".new", path)
    except OSError as error:
        listener.close()
        return None, error
    return listener, None


def _serve_until(process: subprocess.Popen, listener: socket.socket, server_state: tuple[dict, dict, dict],
                 set_by_imports: dict[str, str], note) -> int:
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    jobs: dict[socket.socket, _Job] = {}
    served = 0
    while True:
        status = process.poll()
        if status is not None and not jobs:
            note(f"command ended ({status}); {served} job(s) served")
            _refuse_waiting(listener, "the command has ended")
            return status
        for key, _events in selector.select(timeout=0.05):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                job = _start_job(conn, listener, jobs, server_state, set_by_imports, note)
                if job is None:
                    conn.close()
                else:
                    jobs[conn] = job
                    served += 1
                    selector.register(conn, selectors.EVENT_READ)
            else:  # a client spoke or went away while its job runs: it was killed
                job = jobs[key.fileobj]
                if not key.fileobj.recv(1):
                    selector.unregister(key.fileobj)
                    note(f"job {job.pid} lost its client: killed")
                    _kill(job.pid)
        for conn, job in list(jobs.items()):
            done, raw, usage = os.wait4(job.pid, os.WNOHANG)
            if not done:
                continue
            status = os.waitstatus_to_exitcode(raw)
            note(f"job {job.pid} ended ({status}) after {time.monotonic() - job.started:.1f} s, "
                 f"{usage.ru_utime + usage.ru_stime:.1f} CPU s: {' '.join(job.argv[1:])}")
            try:
                send(conn, {"status": status})
            except OSError:
                pass
            if conn in selector.get_map():
                selector.unregister(conn)
            conn.close()
            del jobs[conn]


def _refuse_waiting(listener: socket.socket, reason: str) -> None:
    """Answer the clients still queued on ``listener`` (an orphaned job's own jobs, say) with a refusal,
    so that each runs its job itself instead of finding the socket closed without an answer."""
    listener.setblocking(False)
    while True:
        try:
            conn, _ = listener.accept()
        except (BlockingIOError, OSError):
            return
        conn.setblocking(True)
        try:
            _request, fds = receive(conn, max_fds=MAX_FDS)
            for fd in fds:
                os.close(fd)
        except (OSError, ValueError):
            pass
        _refuse(conn, reason)
        conn.close()


def _refuse(conn: socket.socket, reason: str) -> None:
    try:
        send(conn, {"refused": reason})
    except OSError:
        pass


def _kill(pid: int) -> None:
    """Kill the job and whatever it started (its process group, made at the fork)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _start_job(conn, listener, jobs, server_state, set_by_imports, note) -> _Job | None:
    try:
        request, fds = receive(conn, max_fds=MAX_FDS)
    except (OSError, ValueError) as error:
        note(f"bad request: {error}")
        return None
    if request is None:
        return None
    if len(fds) != len(request.get("fds", ())) or request.get("fds", [])[:3] != [0, 1, 2]:
        reason = "its descriptors did not arrive as 0, 1, 2 and the ones it named"
    else:
        reason = refusal(request, *server_state)
    if reason is None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        try:
            pid = os.fork()
        except OSError as error:  # no process to spare: the client runs the job itself
            reason = f"cannot fork ({error})"
    if reason is not None:
        note(f"refused ({reason}): {' '.join(request.get('argv', [])[1:])}")
        _refuse(conn, reason)
        for fd in fds:
            os.close(fd)
        return None
    if pid == 0:  # the job
        try:
            listener.close()
            for other in jobs:
                other.close()
            conn.close()
            _become_job(request, fds, set_by_imports)
        finally:
            os._exit(70)  # only if _become_job itself failed
    try:
        os.setpgid(pid, pid)  # as the child does: no window in which a kill misses its group
    except OSError:
        pass
    for fd in fds:
        os.close(fd)
    try:
        send(conn, {"pid": pid})
    except OSError:  # the client is gone already: the selector sees it and the job is killed
        pass
    note(f"job {pid} started: {' '.join(request['argv'][1:])}")
    return _Job(pid=pid, argv=request["argv"])


def _become_job(request: dict, fds: list[int], set_by_imports: dict[str, str]) -> None:
    """In the forked child: take the client's place, run ``balagg.cli.main`` and exit with its status.

    The environment is the client's plus what the preloaded imports set for themselves where the
    client has no value (torch sets ``KMP_*`` and ``TORCHINDUCTOR_CACHE_DIR``), as after those imports
    in the client's own process."""
    import logging

    os.setpgid(0, 0)  # signals reach the job through its client only, as exactly one copy
    import fcntl

    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 1024) for fd in fds]  # out of the way of the targets
    for target, fd in zip(request["fds"], high):
        os.dup2(fd, target)  # inheritable, as after exec
    keep = set(request["fds"])
    # What exec would close: the copies above and the server's own descriptors (its log, its selector;
    # the objects that own them live in the server's frames below this one, never finalised here).
    for fd in all_fds():
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(set_by_imports | request["env"])
    os.umask(request["umask"])
    sys.argv = list(request["argv"])
    sys.path[:] = request["path"]
    tempfile.tempdir = None
    for handler in list(logging.root.handlers):
        logging.root.removeHandler(handler)
    logging.root.setLevel(logging.WARNING)
    for name in [name for name in sys.modules if name == "balagg" or name.startswith("balagg.")]:
        del sys.modules[name]  # the job imports balagg from its own sys.path (a tree's own src/, say)
    from balagg.cli import exit_without_teardown, main

    try:
        code = main(sys.argv[1:])
    except SystemExit as stop:  # argparse's errors and --help
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, int) and stop.code is not None:
            print(stop.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    exit_without_teardown(code)
