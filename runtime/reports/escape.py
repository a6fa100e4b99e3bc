"""Escaping for text that came from a config or a model server (names, replies, reasons):
such text may hold Markdown, HTML, spreadsheet formulas or matplotlib mathtext."""

from __future__ import annotations

import re

# One pass, so the backslashes added are not escaped again. An ``_`` between letters or
# digits is never emphasis (CommonMark), so ``context_exceeded`` stays as it is.
_MD_SPECIAL = re.compile(r"([\\`*\[\]|<>]|(?<![^\W_])_|_(?![^\W_]))")
# Cells a spreadsheet would read as a formula (OWASP CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def md(text: object) -> str:
    """``text`` as literal Markdown inline text, one line: a table cell keeps its columns,
    ``<script>`` stays text, ``[x](javascript:…)`` is no link, ``#`` no heading."""
    one_line = " ".join(str(text).splitlines())
    escaped = _MD_SPECIAL.sub(r"\\\1", one_line)
    return "\\" + escaped if escaped.startswith("#") else escaped


def csv_cell(value: object) -> object:
    """A text ``value`` a spreadsheet would run as a formula, prefixed with ``'``; any other
    value as it is (numbers such as -1 stay numbers)."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def plot_label(text: object) -> str:
    """``text`` for a matplotlib label: ``$`` escaped, so a name is not read as mathtext."""
    return str(text).replace("$", r"\$")
