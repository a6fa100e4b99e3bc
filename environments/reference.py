"""What parley records about a reference checkout it reads prompts and instances from (a game's
``reference`` setting): its git commit and the hash of each file read."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

GIT_TIMEOUT_S = 2.0


class ReferenceError(ValueError):
    """A reference folder that cannot be played; the message names the file and the fault."""


def git_commit(folder: Path) -> str | None:
    """The commit checked out in ``folder``, or None when it is not a git checkout."""
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and len(commit) == 40 else None


def read_hashed(file: Path, root: Path, files: dict[str, str]) -> bytes:
    """``file``'s bytes, its sha256 noted in ``files`` under its path relative to ``root``."""
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ReferenceError(f"{file}: cannot be read ({exc.strerror or exc})") from None
    files[file.relative_to(root).as_posix()] = hashlib.sha256(raw).hexdigest()
    return raw
