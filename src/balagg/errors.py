"""One-line messages for the failures a user can cause or meet: a full disk, a truncated weights file (a
config that does not validate: balagg.campaign). Each names the file (and line, where there is one) and
the cause, so the CLI and the workflow print it instead of a traceback."""

from __future__ import annotations

import errno
import os
from pathlib import Path

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
TORCH_WRITE_FAILURES = ("unexpected pos", "file write failed", "PytorchStreamWriter failed")
"""How torch.save reports a failed write (it hides the OSError, e.g. ENOSPC, behind its zip writer)."""
DISK_FULL_TEXTS = ("No space left on device", "StorageFull", "Disk quota exceeded")
"""How libraries that wrap the OSError (safetensors, torch) spell a full disk in their messages."""


def with_filename(error: OSError, path: str | os.PathLike) -> OSError:
    """``error`` with ``path`` as its filename when it has none (a failed write() names no file)."""
    if error.filename is not None:
        return error
    named = type(error)(error.errno, error.strerror or os.strerror(error.errno or 0), str(path))
    named.__cause__ = error
    return named


def os_error_line(error: OSError) -> str:
    """``<file>: no space left on device (...)`` for a full disk, ``<file>: <strerror>`` otherwise."""
    where = error.filename if error.filename is not None else "(unknown file)"
    if error.errno in DISK_FULL:
        return f"{where}: no space left on device ({os.strerror(error.errno)}); free space and rerun"
    return f"{where}: {error.strerror or error}"


def checkpoint_write_error(error: BaseException, folder: str | os.PathLike) -> OSError | None:
    """The OSError behind a failed save under ``folder`` -- a full disk reported by open()/write()
    (no file named), by torch.save's zip writer ('unexpected pos') or by safetensors ('StorageFull') --
    named with ``folder``; None when ``error`` is not a failed write."""
    text = str(error)
    if isinstance(error, OSError):
        return with_filename(error, folder) if error.errno in DISK_FULL else None
    if any(mark in text for mark in DISK_FULL_TEXTS):
        code = errno.ENOSPC
    elif isinstance(error, RuntimeError) and any(mark in text for mark in TORCH_WRITE_FAILURES):
        code = errno.ENOSPC if _nearly_full(folder) else errno.EIO
    else:
        return None
    named = OSError(code, os.strerror(code), str(folder))
    named.__cause__ = error
    return named


def _nearly_full(folder: str | os.PathLike, slack: int = 64 << 20) -> bool:
    import shutil

    path = Path(folder)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free < slack
    except OSError:
        return True


def check_safetensors(folder: str | os.PathLike) -> None:
    """ValueError naming the file when a ``*.safetensors`` weights file in ``folder`` is empty, truncated
    (its header promises more bytes than the file holds) or unreadable."""
    import json
    import struct

    for path in sorted(Path(folder).glob("*.safetensors")):
        size = path.stat().st_size
        if size == 0:
            raise ValueError(f"{path}: empty weights file (0 bytes); the checkpoint was not written completely")
        with path.open("rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise ValueError(f"{path}: truncated weights file ({size} bytes, no safetensors header)")
            (header_size,) = struct.unpack("<Q", head)
            if 8 + header_size > size:
                raise ValueError(f"{path}: truncated weights file ({size} bytes, header alone needs {8 + header_size})")
            try:
                header = json.loads(handle.read(header_size))
            except ValueError:
                raise ValueError(f"{path}: corrupt weights file (unreadable safetensors header)") from None
        end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
        if 8 + header_size + end > size:
            raise ValueError(f"{path}: truncated weights file ({size} bytes of {8 + header_size + end}); "
                             "the checkpoint was not written completely")


def exit_status(returncode: int) -> int:
    """A child's return code as a shell reports it: ``128 + N`` for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode
