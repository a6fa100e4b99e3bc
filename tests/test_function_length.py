"""No function of the runtime is longer than :data:`MOST_LINES` lines (nested ones included, and
counted inside their outer function too): one that grows past it is split into parts with names
of their own. A violation fails naming the file, the line and the function."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOST_LINES = 100


def long_functions(folder: Path, most: int = MOST_LINES) -> Iterator[str]:
    """``path:line name (n lines)`` of every function under ``folder`` longer than ``most``
    lines, from its ``def`` (or first decorator) to its last line."""
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - first + 1
                if lines > most:
                    where = path.relative_to(folder.parent)
                    yield f"{where}:{node.lineno} {node.name} ({lines} lines)"


def test_no_runtime_function_is_longer_than_the_limit() -> None:
    found = list(long_functions(ROOT / "runtime"))
    assert not found, f"functions over {MOST_LINES} lines:\n" + "\n".join(found)


def test_the_check_finds_a_long_function(tmp_path: Path) -> None:
    folder = tmp_path / "runtime"
    folder.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MOST_LINES))
    (folder / "long.py").write_text(
        f"def short():\n    return 1\n\n\n@staticmethod\ndef long():\n{body}"
    )
    assert list(long_functions(folder)) == [f"runtime/long.py:6 long ({MOST_LINES + 2} lines)"]
