"""Servers run as child processes (the stand-in server, llama.cpp's server, launched model
servers): a free loopback port, their output read so that a full pipe never blocks them, and
a stop that waits, then kills."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections import deque


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def drain(process: subprocess.Popen[str], into: deque[str]) -> None:
    """Read what ``process`` prints into ``into`` (its latest lines), on a thread of its own."""

    def read() -> None:
        if process.stdout is None:
            return
        with contextlib.suppress(ValueError, OSError):
            for line in process.stdout:
                into.append(line)

    threading.Thread(target=read, daemon=True).start()


def stop(process: subprocess.Popen[str] | None, grace_s: float) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; its output pipe closed."""
    if process is None:
        return
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        with contextlib.suppress(OSError, ValueError):
            process.stdout.close()
