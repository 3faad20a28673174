"""Inside the sandbox: confine this process, then grade one program on its tests as lcb_runner does (stdlib only).

Started by :mod:`balagg.evaluation.verify.sandbox` as ``python -I -B sandbox_launcher.py`` -- in ``namespaces``
mode under ``unshare --net --mount --pid --fork``, so this process is PID 1 of a fresh PID namespace
(when it exits the kernel kills every process left in it), sits in a private mount namespace and has
a network namespace with no usable interface. It reads a JSON spec on stdin:

    {"code": str, "fn_name": str | null, "inputs": [str, ...], "workdir": str, "uid": int | null,
     "mode": "namespaces" | "rlimits", "limits": {...}}

Isolation, in order: (namespaces) remounts every mount read-only and puts a small fresh tmpfs on
``workdir``; sets hard rlimits (address space, processes, file size, open files, no core files); drops to
``uid`` (root only); forks one child for the program, which gets a CPU-time limit and an audit hook that
refuses sockets and subprocesses. The child's real stdin is empty and its real stdout/stderr go to
/dev/null.

Grading contract: the child runs the program the way LiveCodeBench's grader (lcb_runner,
``lcb_runner/evaluation/testing_util.py``) runs it, so that a program passes here iff it passes there
(docs/evaluation.md lists every rule and the few differences):

* lcb_runner's guard (``reliability_guard``): ``quit``, ``help`` and a list of destructive ``os``,
  ``shutil`` and ``subprocess`` functions are None, some modules unimportable; ints print with up to
  50000 digits.
* stdin problems (``fn_name`` null): a last top-level ``if __name__ == '__main__':`` is unwrapped; the
  program's top-level imports run after :data:`IMPORT_BLOCK` at module level and every other statement
  becomes the body of ``def wrapped_function():``, which is called once per test, in order, in this one
  process: ``sys.stdin`` is a stand-in holding the test input, the real stdin's ``read``/``readline``/
  ``readlines`` return the input too, ``sys.stdout`` is a StringIO whose text is the test's output, and
  ``SystemExit`` ends the test normally (the exit status is not looked at).
* call-based problems: :data:`IMPORT_BLOCK` + the program run as a module; the module's ``fn_name``
  function is called for every test, with the input's lines, each ``json.loads``-ed, as arguments; the
  return value is sent back tagged by type (:func:`encode_value`) for the sandbox to compare with ``==``.
* both: if the text run contains ``class Solution``, ``Solution()`` is made once and the function is
  its method (so a stdin program with that text, whose class is inside the wrapper, fails to load).

Per test the launcher allows ``timeout_s`` wall-clock seconds (the module's own run, before the first
test, gets the same), reads at most ``max_output_bytes`` of output, and stops at the first test that does
not run cleanly. It writes ``{"results": [{"status": ..., "output": ...}, ...]}`` to stdout: one result
per test run, or a single one if the program failed before its first test; status is ``ok``, ``error``
(an exception other than a stdin program's SystemExit, or the process died), ``timeout``,
``output_limit`` or ``syntax_error``. Outputs are compared outside the sandbox, which never sees the
expected outputs.
"""

import ast
import builtins
import ctypes
import faulthandler
import io
import json
import numbers
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import types

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
MNT_DETACH = 2
_FLAG_OPTIONS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}

_BLOCK_MODULES = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random",
                  "statistics", "itertools", "functools", "operator", "io", "sys", "json")
IMPORT_BLOCK = ("".join(f"from {name} import *\n" for name in (*_BLOCK_MODULES, "builtins", "typing"))
                + "".join(f"import {name}\n" for name in _BLOCK_MODULES)
                + "sys.setrecursionlimit(50000)\n")
"""lcb_runner's ``import_string``, in its order (which decides what a name means: ``copy`` and ``datetime``
end as the modules, ``open`` and ``pow`` as the builtins): put before every program, stdin and call-based."""

INT_MAX_STR_DIGITS = 50000  # compute_code_generation_metrics: sys.set_int_max_str_digits(50000)
MAIN_GUARD = "__name__ == '__main__'"  # clean_if_name compares the unparsed condition with this
WRAPPER = "wrapped_function"
MODULE_NAME = "tmp_sol"  # what ``__name__`` is for the program: never "__main__"

# reliability_guard: what lcb_runner sets to None before grading (builtins.exit stays).
GUARDED_OS = ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty",
              "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown",
              "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir")
GUARDED_MODULES = ("ipdb", "joblib", "resource", "psutil", "tkinter")
PRELOAD_IF_NAMED = ("numpy", "scipy", "pandas")  # the program may import numpy, directly or not

_FRAME = re.compile(rb"(ok|error|output_limit|syntax_error) ([0-9]{1,12})\n")
_HEADER_MAX = 32
_WATCH_S = 0.02

# Bound before the program runs, so nothing it rebinds changes how results are sent.
_write, _exit, _dumps, _sleep = os.write, os._exit, json.dumps, time.sleep


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


def apply_guard():
    """What lcb_runner's ``reliability_guard`` (and its grading process) change before a program runs."""
    sys.set_int_max_str_digits(INT_MAX_STR_DIGITS)
    faulthandler.disable()
    builtins.quit = None
    builtins.help = None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in GUARDED_OS:
        setattr(os, name, None)
    shutil.rmtree = shutil.move = shutil.chown = None
    subprocess.Popen = None
    for name in GUARDED_MODULES:
        sys.modules[name] = None


def preload(code):
    """numpy, imported before the guard when the program may use it: lcb_runner's grading process has it
    imported already, and importing it under the guard fails (it calls os.putenv)."""
    if any(name in code for name in PRELOAD_IF_NAMED):
        os.environ["OMP_NUM_THREADS"] = "1"  # one BLAS thread: its buffers stay within the memory limit
        try:
            import numpy  # noqa: F401
        except BaseException:  # noqa: BLE001 -- not installed here: the program's own import fails
            pass


def _unwrap_main_guard(code):
    """clean_if_name: a last top-level ``if __name__ == '__main__':`` replaced by its body (else dropped)."""
    try:
        tree = ast.parse(code)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == MAIN_GUARD:
            code = ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    except Exception:  # noqa: BLE001 -- lcb_runner leaves the code as it is, whatever went wrong
        pass
    return code


def stdin_source(code):
    """The text lcb_runner runs for a stdin program (make_function): the import block, the program's
    top-level imports, then ``def wrapped_function():`` holding all its other statements. A program that
    does not parse is left as it is (and fails to compile)."""
    code = _unwrap_main_guard(code)
    try:
        tree = ast.parse(code)
        imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        others = [node for node in tree.body if not isinstance(node, (ast.Import, ast.ImportFrom))]
        fields = {"type_params": []} if "type_params" in ast.FunctionDef._fields else {}
        function = ast.FunctionDef(name=WRAPPER, args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                                                    kw_defaults=[], defaults=[]),
                                   body=others, decorator_list=[], returns=None, lineno=-1, **fields)
        return IMPORT_BLOCK + "\n" + ast.unparse(imports) + "\n" + ast.unparse(function)
    except Exception:  # noqa: BLE001
        return code


def call_based_source(code):
    """The text lcb_runner runs for a call-based program (grade_call_based)."""
    return IMPORT_BLOCK + "\n\n" + code


class StandInStdin:
    """``sys.stdin`` while a stdin test runs, with lcb_runner's behaviour: ``read(...)`` gives the whole
    input whatever the size asked, ``readline`` reads on (keeping '\\n'), ``readlines()`` is
    ``input.split('\\n')``, ``buffer`` has ``read``/``readline`` only (the latter always the first line);
    anything else is a StringIO's. It is not iterable: ``for line in sys.stdin`` raises TypeError."""

    def __init__(self, text):
        self._text = text
        self._stream = io.StringIO(text)
        self.buffer = StandInBuffer(text)

    def read(self, *args):
        return self._text

    def readline(self, *args):
        return self._stream.readline(*args)

    def readlines(self, *args):
        return self._text.split("\n")

    def __getattr__(self, name):
        return getattr(self._stream, name)


class StandInBuffer:
    def __init__(self, text):
        self._data = text.encode("utf-8")

    def read(self, *args):
        return self._data

    def readline(self, *args):
        return self._data.split(b"\n")[0] + b"\n"


class Capture(io.StringIO):
    """``sys.stdout`` while a stdin test runs. Its ``close`` takes one argument, as lcb_runner's does, so
    ``sys.stdout.close()`` raises TypeError."""

    def __init__(self):
        super().__init__()
        self.close = lambda _: 1


class _Watch:
    """Ends the child (status output_limit) when the current capture outgrows the limit; a thread that
    looks every few ms, so the program's writes go straight to the C StringIO, as in lcb_runner."""

    def __init__(self, out_fd, limit):
        self.capture, self.out_fd, self.limit = None, out_fd, limit
        self.lock = threading.Lock()  # a test's own frame is never sent while this one is
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            _sleep(_WATCH_S)
            with self.lock:
                if self.capture is not None and self.capture.tell() > self.limit:
                    send(self.out_fd, "output_limit")
                    _exit(1)


class OutputLimit(Exception):
    pass


def run_stdin_test(function, text, watch):
    """One test of a stdin program (call_method inside Capturing): its output."""
    real_stdin, real_stdout = sys.stdin, sys.stdout
    lines = iter(text.split("\n"))
    swapped = {"read": lambda *args: text, "readline": lambda *args: next(lines),
               "readlines": lambda *args: text.split("\n")}
    capture = Capture()
    watch.capture = capture
    for name, method in swapped.items():
        setattr(real_stdin, name, method)
    sys.stdout, sys.stdin = capture, StandInStdin(text)
    try:
        try:
            function()
        except SystemExit:
            pass
    except BaseException:
        if capture.tell() > watch.limit:  # e.g. a MemoryError from writing faster than the watch looks
            raise OutputLimit from None
        raise
    finally:
        with watch.lock:
            watch.capture = None
        sys.stdin, sys.stdout = real_stdin, real_stdout
        for name in swapped:
            real_stdin.__dict__.pop(name, None)
    if capture.tell() > watch.limit:  # before getvalue(), which would build all of it
        raise OutputLimit
    return capture.getvalue()


def encode_value(value):
    """A return value as JSON that keeps what ``==`` against a JSON-decoded value depends on: lists are
    ``["l", items]``, tuples ``["t", items]``, dicts ``["d", [[key, value], ...]]``, sets ``["s", items]``,
    frozensets ``["f", items]``, and subclasses of these and of int/float/str count as their base (numpy
    scalars as their Python value). Any other object is ``["x", type name]`` and equals nothing."""
    if value is None or value is True or value is False:
        return value
    kind = type(value)
    if kind in (int, float, str):
        return value
    if kind.__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return encode_value(value.item())
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, list):
        return ["l", [encode_value(item) for item in value]]
    if isinstance(value, tuple):
        return ["t", [encode_value(item) for item in value]]
    if isinstance(value, dict):
        return ["d", [[encode_value(key), encode_value(item)] for key, item in value.items()]]
    if isinstance(value, set):
        return ["s", [encode_value(item) for item in value]]
    if isinstance(value, frozenset):
        return ["f", [encode_value(item) for item in value]]
    if isinstance(value, numbers.Integral):
        return int(value)
    return ["x", kind.__name__]


def send(out_fd, status, payload=b""):
    data = f"{status} {len(payload)}\n".encode() + payload
    while data:
        data = data[_write(out_fd, data):]


def _text_bytes(text):
    return text.encode("utf-8", errors="surrogatepass")


def load_program(code, fn_name):
    """The program's module, run (compile_code), and the function to call per test: ``wrapped_function``
    or ``fn_name``, of ``Solution()`` if the text run contains ``class Solution``, else of the module.
    Raises SyntaxError (and the like) if it does not compile, anything else if it fails to load."""
    source = stdin_source(code) if fn_name is None else call_based_source(code)
    code_obj = compile(source, "<solution>", "exec")
    module = types.ModuleType(MODULE_NAME, "")
    exec(code_obj, module.__dict__)
    # For both kinds (so a stdin program whose rewritten text says "class Solution" fails to load).
    owner = module.Solution() if "class Solution" in source else module
    return getattr(owner, WRAPPER if fn_name is None else fn_name)


def run_child(code, fn_name, inputs, out_fd, limits):
    """In the forked child: load the program, send a frame for that, then one per test, then exit.

    A frame is ``b"<status> <n>\\n"`` and n bytes: the output (stdin) or the encoded return value. The
    frames come from the program's own process, so a program could write some itself; it gains nothing
    it could not print, since the expected outputs never enter the sandbox."""
    cpu_s = int((limits["timeout_s"] + 1) * (len(inputs) + 1))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    arguments = None
    if fn_name is not None:
        try:
            arguments = [[json.loads(line) for line in text.split("\n")] for text in inputs]
        except (ValueError, RecursionError):
            send(out_fd, "error")
            return
    preload(code)
    apply_guard()
    sys.addaudithook(_refuse)
    watch = _Watch(out_fd, limits["max_output_bytes"]) if fn_name is None else None
    try:
        target = load_program(code, fn_name)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        send(out_fd, "syntax_error")
        return
    except BaseException:  # noqa: BLE001 -- the program failed to load: every test fails
        send(out_fd, "error")
        return
    send(out_fd, "ok")
    for index, text in enumerate(inputs):
        try:
            if fn_name is None:
                payload = _text_bytes(run_stdin_test(target, text, watch))
            else:
                payload = _dumps(encode_value(target(*arguments[index]))).encode()
        except OutputLimit:
            send(out_fd, "output_limit")
            return
        except BaseException:  # noqa: BLE001 -- SystemExit too: in lcb_runner it ends the grading process
            send(out_fd, "error")
            return
        send(out_fd, "ok", payload)


def run_tests(code, fn_name, inputs, limits):
    """Run the program on every input in one forked child; a result per test run (or one for a
    program that fails before its first test), stopping at the first that is not ``ok``."""
    reader, writer = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(reader)
        os.close(writer)
        return [{"status": "error", "output": ""}]
    if pid == 0:
        os.close(reader)
        try:
            run_child(code, fn_name, inputs, writer, limits)
        finally:
            _exit(0)
    os.close(writer)
    results, frames, buffer, failed = [], 0, bytearray(), None
    deadline = time.monotonic() + limits["timeout_s"]
    while frames <= len(inputs) and failed is None:
        left = deadline - time.monotonic()
        if left <= 0:
            failed = "timeout"
            break
        ready, _, _ = select.select([reader], [], [], left)
        if not ready:
            continue
        chunk = os.read(reader, 1 << 16)
        if not chunk:
            failed = "error"  # the child died, or closed its end, without reporting
            break
        buffer += chunk
        while frames <= len(inputs) and failed is None:
            end = buffer.find(b"\n", 0, _HEADER_MAX)
            if end < 0:
                if len(buffer) >= _HEADER_MAX:
                    failed = "error"
                break
            header = _FRAME.fullmatch(bytes(buffer[:end + 1]))
            if header is None:
                failed = "error"
                break
            status, size = header.group(1).decode(), int(header.group(2))
            if size > limits["max_output_bytes"]:
                failed = "output_limit"
                break
            if len(buffer) < end + 1 + size:
                break
            payload = bytes(buffer[end + 1:end + 1 + size])
            del buffer[:end + 1 + size]
            if frames > 0 or status != "ok":  # frame 0 says the program loaded
                try:
                    output = payload.decode("utf-8", errors="surrogatepass")
                except UnicodeDecodeError:
                    output = payload.decode("utf-8", errors="replace")
                results.append({"status": status, "output": output})
                if status != "ok":
                    failed = status
                    break
            frames += 1
            deadline = time.monotonic() + limits["timeout_s"]
    os.close(reader)
    if failed is not None and (not results or results[-1]["status"] == "ok"):
        results.append({"status": failed, "output": ""})
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)
    return results


def main():
    spec = json.loads(sys.stdin.read())
    limits = spec["limits"]
    if spec["mode"] == "namespaces":
        confine_filesystem(spec["workdir"], spec["uid"], limits["workdir_mb"])
    os.chdir(spec["workdir"])
    set_limits(limits, spec["uid"])
    results = run_tests(spec["code"], spec["fn_name"], spec["inputs"], limits)
    sys.stdout.write(json.dumps({"results": results}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
