"""Files a user gives (a run's config, a models file, the stand-in server's config, an
instances file, a labelled set), read with one reason when they cannot be, never a traceback:
a YAML mapping (:func:`read_mapping`), or JSON objects one a line (:func:`read_json_objects`).

Each reader says the reason its own way (:class:`~parley.runtime.config.ConfigError`, the
stand-in server's ``SimConfigError``, a line of ``parley errors``); the reasons are the same
words everywhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


class YamlFileError(ValueError):
    """Why a YAML file cannot be used, in words to show after its path."""


def read_mapping(path: str | Path) -> dict[str, Any]:
    """The mapping at the top of the YAML file ``path``; an empty file is an empty mapping.

    >>> from parley.user_files import read_mapping
    >>> read_mapping("configs/quickstart.yaml")["name"]  # doctest: +SKIP
    'quickstart'
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise YamlFileError("no such file") from None
    except IsADirectoryError:
        raise YamlFileError("a folder: name the file in it") from None
    except OSError as exc:
        raise YamlFileError(f"cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise YamlFileError("cannot be read: not UTF-8 text") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise YamlFileError(f"not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise YamlFileError(f"a YAML mapping at the top level, not {type(data).__name__}")
    return data


class JsonLinesError(ValueError):
    """Why a file of JSON objects, one a line, cannot be used: its first bad line, or why it
    cannot be read."""


def read_json_objects(path: str | Path, what: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of ``path``; ``what`` names one object in
    the reason a line is not one (``an instance``).

    >>> from parley.user_files import read_json_objects
    >>> read_json_objects("instances.jsonl", "an instance")  # doctest: +SKIP
    [(1, {'seed': 0, ...}), ...]
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise JsonLinesError("cannot be read: not UTF-8 text") from None
    except OSError as exc:
        raise JsonLinesError(f"cannot be read: {exc.strerror or exc}") from None
    objects = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise JsonLinesError(f"line {number} is not JSON: {exc}") from None
        if not isinstance(value, dict):
            kind = type(value).__name__
            raise JsonLinesError(f"line {number} is a JSON {kind}, not an object ({what})")
        objects.append((number, value))
    return objects
