"""The README's Python example runs as written: every ``>>>`` line of README.md is a doctest,
and its printed results are the ones the README shows (scripted and random play are seeded, so
they are the same on every machine)."""

from __future__ import annotations

import doctest
import tempfile
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(text: str) -> str:
    """The README with every line outside its ```python blocks blanked: only code a user would
    copy is run, and a failure names its line in README.md."""
    lines: list[str] = []
    inside = False
    for line in text.splitlines():
        fence = line.strip()
        if fence.startswith("```"):
            inside = not inside and fence == "```python"
            lines.append("")
        else:
            lines.append(line if inside else "")
    return "\n".join(lines) + "\n"


def test_readme_examples_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The example writes its run folder under tempfile.mkdtemp(): keep it in this test's folder.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    test = doctest.DocTestParser().get_doctest(
        python_blocks(README.read_text(encoding="utf-8")), {}, "README.md", str(README), 0
    )
    assert test.examples, "README.md has no >>> example in a ```python block"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    result = runner.summarize(verbose=False)
    assert result.attempted == len(test.examples)
    assert result.failed == 0, "".join(report)
