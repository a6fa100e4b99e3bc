"""A YAML file that should hold a mapping (a run's config, a models file, the stand-in server's
config), read with one reason when it cannot be, never a traceback.

Each reader says the reason its own way (:class:`~parley.runtime.config.ConfigError`, the
stand-in server's ``SimConfigError``, a line of ``parley errors``); the reasons are the same
words everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class YamlFileError(ValueError):
    """Why a YAML file cannot be used, in words to show after its path."""


def read_mapping(path: str | Path) -> dict[str, Any]:
    """The mapping at the top of the YAML file ``path``; an empty file is an empty mapping.

    >>> from parley.yaml_files import read_mapping
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
