"""Inside the sandbox: confine this process, then run one program on each test input (stdlib only).

Started by :mod:`balagg.evaluation.verify.sandbox` as ``python -I -B sandbox_launcher.py`` -- in ``namespaces``
mode under ``unshare --net --mount --pid --fork``, so this process is PID 1 of a fresh PID namespace
(when it exits the kernel kills every process left in it), sits in a private mount namespace and has
a network namespace with no usable interface. It reads a JSON spec on stdin:

    {"code": str, "fn_name": str | null, "inputs": [str, ...], "workdir": str, "uid": int | null,
     "mode": "namespaces" | "rlimits", "limits": {...}}

and, in order: (namespaces) remounts every mount read-only and puts a small fresh tmpfs on ``workdir``;
sets hard rlimits (address space, processes, file size, open files, no core files); drops to ``uid``
(root only); then for each input forks a child that gets its own CPU-time limit, an audit hook that
refuses sockets and subprocesses, and runs the program -- as ``__main__`` with the input on stdin
(stdin/stdout problems) or as ``Solution().<fn_name>(*args)`` with one JSON argument per input line
(LiveCodeBench functional tests). A child's output is read up to ``max_output_bytes``; the child is
killed at ``timeout_s`` wall-clock seconds. It stops at the first test that does not run cleanly.
Writes ``{"results": [{"status": ..., "output": ...}, ...]}`` to stdout; status is ``ok``,
``error`` (exception or non-zero exit), ``timeout``, ``output_limit`` or ``syntax_error``.
"""

import ctypes
import json
import os
import resource
import select
import signal
import sys
import time

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
MNT_DETACH = 2
_FLAG_OPTIONS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}

# LiveCodeBench's functional-test prelude: solutions assume these names exist.
PRELUDE = (
    "from typing import *\nfrom functools import *\nfrom collections import *\nfrom itertools import *\n"
    "from heapq import *\nfrom bisect import *\nfrom string import *\nfrom operator import *\n"
    "from math import *\nimport math, string, re, random, heapq, bisect, collections, itertools, "
    "functools, operator, copy, sys\ninf = float('inf')\n"
)


def _mount(libc, source, target, fstype, flags, data):
    if libc.mount(source, target, fstype, flags, data) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {target}: {os.strerror(error)}")


def _hidden_ancestor(path):
    """The top-most ancestor of ``path`` that other users cannot traverse (None if all can)."""
    current = "/"
    for part in [p for p in path.split("/") if p]:
        current = os.path.join(current, part)
        if not os.stat(current).st_mode & 0o001:
            return current
    return None


def expose_interpreter(libc, stash_root):
    """Let an unprivileged uid import from this interpreter's installation.

    An installation under a directory closed to other users (e.g. /root/.pyenv) is unreadable after the
    uid switch. In this mount namespace the closed directory is replaced by an empty world-traversable
    tmpfs into which only the installation's directories are bind-mounted back (the rest of that
    directory, e.g. /root's other contents, stays hidden)."""
    needed = sorted({os.path.realpath(p) for p in [sys.base_prefix, sys.prefix, *sys.path] if p and os.path.isdir(p)})
    roots = []
    for path in needed:  # keep the outermost of nested paths
        if not any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots):
            roots.append(path)
    by_ancestor = {}
    for path in roots:
        ancestor = _hidden_ancestor(path)
        if ancestor is not None and ancestor != path:
            by_ancestor.setdefault(ancestor, []).append(path)
    stashes = []
    for ancestor, paths in by_ancestor.items():
        staged = []
        for path in paths:
            stash = os.path.join(stash_root, str(len(stashes)))
            os.mkdir(stash)
            _mount(libc, path.encode(), stash.encode(), None, MS_BIND | MS_REC, None)
            stashes.append(stash)
            staged.append((stash, path))
        _mount(libc, b"tmpfs", ancestor.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=1m")
        for stash, path in staged:
            os.makedirs(path, exist_ok=True)
            _mount(libc, stash.encode(), path.encode(), None, MS_BIND | MS_REC, None)
    for stash in stashes:
        libc.umount2(stash.encode(), MNT_DETACH)


def confine_filesystem(workdir, uid, size_mb):
    """Every mount read-only (in this private mount namespace only); a fresh tmpfs on workdir."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    _mount(libc, b"tmpfs", workdir.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0700,size=1m")
    expose_interpreter(libc, workdir)
    if libc.umount2(workdir.encode(), MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), f"umount {workdir}")
    targets = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            target = fields[4].encode().decode("unicode_escape")
            flags = MS_REMOUNT | MS_BIND | MS_RDONLY
            for option in fields[5].split(","):
                flags |= _FLAG_OPTIONS.get(option, 0)
            targets.append((target, flags))
    for target, flags in targets:
        try:
            _mount(libc, None, target.encode(), None, flags, None)
        except OSError:
            if target in ("/", "/tmp", "/dev/shm", "/var/tmp"):
                raise  # a writable place we could not close: refuse to run
    # A /proc of this PID namespace: the host's processes (and their environments) are not listed.
    _mount(libc, b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    owner = uid if uid is not None else 0
    options = f"size={size_mb}m,mode=0700,uid={owner},gid={owner}"
    _mount(libc, b"tmpfs", workdir.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode())


def set_limits(limits, uid):
    mb = 1024 * 1024
    for name, value in (("RLIMIT_AS", limits["memory_mb"] * mb), ("RLIMIT_NPROC", limits["max_processes"]),
                        ("RLIMIT_FSIZE", limits["file_size_mb"] * mb), ("RLIMIT_NOFILE", limits["open_files"]),
                        ("RLIMIT_CORE", 0)):
        resource.setrlimit(getattr(resource, name), (value, value))
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


def _refuse(event, args):
    if event.startswith(("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn")):
        raise PermissionError(f"{event} is not allowed in the sandbox")


def run_child(code_obj, fn_name, test_input, out_fd, cpu_s):
    """In the forked child: run the program on one input, print its output to out_fd, exit."""
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(out_fd if fn_name is None else devnull, 1)
    os.dup2(devnull, 2)
    if fn_name is None:
        data = test_input.encode()
        if len(data) < 60000:  # fits the pipe buffer: written whole before the program starts
            reader, writer = os.pipe()
            os.write(writer, data)
            os.close(writer)
            os.dup2(reader, 0)
        else:
            with open("stdin.txt", "wb") as handle:  # in the sandbox's own tmpfs work dir
                handle.write(data)
            os.dup2(os.open("stdin.txt", os.O_RDONLY), 0)
    else:
        os.dup2(devnull, 0)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    sys.setrecursionlimit(100000)
    sys.addaudithook(_refuse)
    status = 0
    try:
        namespace = {"__name__": "__main__" if fn_name is None else "solution", "__builtins__": __builtins__}
        exec(code_obj, namespace)
        if fn_name is not None:
            args = [json.loads(line) for line in test_input.split("\n") if line.strip()]
            owner = namespace.get("Solution")
            target = getattr(owner(), fn_name) if owner is not None else namespace[fn_name]
            result = json.dumps(target(*args))
            os.write(out_fd, result.encode())
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001 -- any failure of the program is that test's failure
        status = 1
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001
        status = status or 1
    os._exit(status)


def run_test(code_obj, fn_name, test_input, limits):
    reader, writer = os.pipe()
    cpu_s = int(limits["timeout_s"]) + 1
    try:
        pid = os.fork()
    except OSError:  # e.g. the process limit, used up by what an earlier test left running
        os.close(reader)
        os.close(writer)
        return {"status": "error", "output": ""}
    if pid == 0:
        os.close(reader)
        try:
            run_child(code_obj, fn_name, test_input, writer, cpu_s)
        finally:
            os._exit(1)
    os.close(writer)
    deadline = time.monotonic() + limits["timeout_s"]
    chunks, size, status = [], 0, None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            status = "timeout"
            break
        ready, _, _ = select.select([reader], [], [], left)
        if not ready:
            continue
        chunk = os.read(reader, 1 << 16)
        if not chunk:
            break
        size += len(chunk)
        if size > limits["max_output_bytes"]:
            status = "output_limit"
            break
        chunks.append(chunk)
    os.close(reader)
    if status is not None:
        os.kill(pid, signal.SIGKILL)
    _, wait_status = os.waitpid(pid, 0)
    if status is None:
        status = "ok" if os.waitstatus_to_exitcode(wait_status) == 0 else "error"
    output = b"".join(chunks).decode("utf-8", errors="replace")
    return {"status": status, "output": output}


def main():
    spec = json.loads(sys.stdin.read())
    limits = spec["limits"]
    if spec["mode"] == "namespaces":
        confine_filesystem(spec["workdir"], spec["uid"], limits["workdir_mb"])
    os.chdir(spec["workdir"])
    set_limits(limits, spec["uid"])
    results = []
    try:
        code_obj = compile((PRELUDE if spec["fn_name"] else "") + spec["code"], "<solution>", "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        results.append({"status": "syntax_error", "output": ""})
    else:
        for test_input in spec["inputs"]:
            result = run_test(code_obj, spec["fn_name"], test_input, limits)
            results.append(result)
            if result["status"] != "ok":
                break
    sys.stdout.write(json.dumps({"results": results}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
