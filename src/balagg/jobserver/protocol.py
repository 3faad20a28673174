"""The messages between a job server and its clients: a 4-byte length and a JSON object on a Unix
socket, with the client's file descriptors passed alongside the request (SCM_RIGHTS)."""

from __future__ import annotations

import json
import os
import socket
import struct

MAX_FDS = 64
"""A client with more inheritable descriptors than this runs its job itself."""

HEADER = struct.Struct("!I")


def send(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    """One message (and ``fds``, passed as descriptors)."""
    data = json.dumps(message).encode()
    payload = HEADER.pack(len(data)) + data
    if fds:
        socket.send_fds(sock, [payload], fds)
    else:
        sock.sendall(payload)


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message (and up to ``max_fds`` descriptors); ``(None, [])`` when the peer has gone."""
    if max_fds:
        chunk, fds, _flags, _address = socket.recv_fds(sock, 65536, max_fds)
    else:
        chunk, fds = sock.recv(65536), []
    buffer = bytearray(chunk)
    if not buffer:
        return None, fds
    while len(buffer) < HEADER.size or len(buffer) < HEADER.size + HEADER.unpack_from(buffer)[0]:
        more = sock.recv(65536)
        if not more:
            return None, fds
        buffer += more
    (size,) = HEADER.unpack_from(buffer)
    return json.loads(buffer[HEADER.size:HEADER.size + size]), fds


def all_fds() -> list[int]:
    """Every open descriptor (one of them the listing's own, closed by the time it is returned)."""
    return [int(name) for name in os.listdir("/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd")]
