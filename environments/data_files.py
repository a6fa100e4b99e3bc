"""Reading a game's data files (MANGO's mazes, clembench's photo datasets) with errors that
name the file, and the line, rather than a bare decoding error.

Such files come from the user's disk: a download cut short, a file of another layout, a line
edited by hand. What their readers raise then (``UnicodeDecodeError``, ``JSONDecodeError``, a
``KeyError`` for a missing field) says nothing of where. :func:`reading` turns it into the
family's own error, one line a run records as the episode's reason.

Example::

    with reading(path, "CLEVR scenes", PhotoDataError) as where:
        for where.line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            ...
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class Where:
    """The line a block is reading (set by the block; None: the file as a whole)."""

    line: int | None = None


@contextmanager
def reading(path: Path, kind: str, error: type[ValueError]) -> Iterator[Where]:
    """Turn what a damaged ``kind`` file raises while the block reads it into ``error``
    naming the file (and the line, where the block sets ``line``)."""
    where = Where()
    try:
        yield where
    except error:
        raise
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text, so not {kind}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        at = f", line {where.line}" if where.line is not None else ""
        why = f"no field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise error(f"{path}{at}: not {kind} ({why})") from None
