"""The pydantic accelerator: message JSON written by orjson from a model's fields.

This is the one module of parley that relies on how pydantic lays out a model instance (its
fields, in order, in the instance's ``__dict__``) and on the model's decorator metadata. It is
used only where :data:`ACTIVE` is true: the installed pydantic lies in :data:`TESTED` (the
releases the codec's differential tests ran on) and ``PARLEY_PYDANTIC_FAST`` is not ``0``.
Otherwise the codec asks pydantic (``model_dump_json``), which gives the same bytes. A
supported pydantic outside :data:`TESTED` is an ordinary install, so why the accelerator is off
is logged at debug level; it is a warning only where ``PARLEY_PYDANTIC_FAST=1`` asked for the
accelerator (``PARLEY_PYDANTIC_FAST=0`` logs nothing).

Why it exists: orjson writes a plain message's fields in a fraction of the time pydantic's
serializer takes, and the transports encode every message they carry.
"""

from __future__ import annotations

import functools
import logging
import os
from importlib import metadata
from types import ModuleType
from typing import Any

import orjson
from pydantic import BaseModel

log = logging.getLogger("parley.bus.codec")

# The pydantic releases ([low, high)) the accelerator was tested on: its bytes equal
# pydantic's there (older releases write some floats differently, 1e+16 for 1e16).
TESTED = ((2, 14), (2, 15))
FORCE_PUBLIC_VARIABLE = "PARLEY_PYDANTIC_FAST"


def check(tested: tuple[tuple[int, int], tuple[int, int]] = TESTED) -> tuple[bool, str]:
    """Whether the accelerator may be used here (with releases in ``tested`` only), and why
    not (empty when it may)."""
    if os.environ.get(FORCE_PUBLIC_VARIABLE, "").strip() == "0":
        return False, ""
    return release_check(tested)


def release_check(tested: tuple[tuple[int, int], tuple[int, int]] = TESTED) -> tuple[bool, str]:
    """:func:`check` without the variable: whether the installed pydantic is a tested one."""
    try:
        parts = metadata.version("pydantic").split(".")
        found: tuple[int, int] | None = (int(parts[0]), int(parts[1]))
    except (metadata.PackageNotFoundError, ValueError, IndexError):
        found = None
    if found is None or not tested[0] <= found < tested[1]:
        version = "unknown" if found is None else f"{found[0]}.{found[1]}"
        low, high = (f"{bound[0]}.{bound[1]}" for bound in tested)
        return False, (
            f"pydantic {version} is outside the range parley's fast message encoding was "
            f"tested on ({low} to before {high}): messages are encoded by pydantic"
        )
    return True, ""


def asked() -> bool:
    """Whether ``PARLEY_PYDANTIC_FAST=1`` asks for the accelerator by name."""
    return os.environ.get(FORCE_PUBLIC_VARIABLE, "").strip() == "1"


def _start(tested: tuple[tuple[int, int], tuple[int, int]] = TESTED) -> bool:
    usable, why = check(tested)
    if why:
        # Off at a pydantic it was not tested on is the normal state of a supported install:
        # a warning on every command would only be noise, unless the user asked for it.
        log.log(logging.WARNING if asked() else logging.DEBUG, "%s", why)
    return usable


# Decided once, at import.
ACTIVE = _start()


class Encoder:
    """orjson's encoding of the plain message models of ``module``: those whose JSON is
    their fields in order (no alias, computed or excluded field, extra fields, or serializer
    of their own), with ``image`` (a model) written by ``image_json``."""

    # What orjson writes differently from pydantic (a datetime's zone, a dataclass's fields)
    # goes to ``default`` and so, refused there, to pydantic.
    OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS

    def __init__(self, module: ModuleType, image: type[BaseModel], image_json: Any) -> None:
        self.plain = self._plain_models(module)
        self.image = image
        self.image_json = image_json
        self._defaults = {
            True: functools.partial(self._fields, inline=True),
            False: functools.partial(self._fields, inline=False),
        }

    @staticmethod
    def _plain_models(module: ModuleType) -> frozenset[type[BaseModel]]:
        plain = set()
        for model in vars(module).values():
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                continue
            if model is BaseModel or model.__module__ != module.__name__:
                continue
            decorators = model.__pydantic_decorators__
            if (
                model.model_config.get("extra") == "allow"
                or model.model_computed_fields
                or decorators.field_serializers
                or decorators.model_serializers
                or any(
                    f.alias or f.serialization_alias or f.exclude
                    for f in model.model_fields.values()
                )
            ):
                continue
            plain.add(model)
        return frozenset(plain)

    def _fields(self, value: Any, inline: bool) -> Any:
        """orjson's ``default``: a plain model as its fields, an image's bytes as its JSON
        carries them; anything else is refused (pydantic encodes the message)."""
        kind = type(value)
        if kind in self.plain:
            return value.__dict__
        if kind is self.image:
            fields = value.__dict__
            data = fields["data"]
            return fields if data is None else {**fields, "data": self.image_json(data, inline)}
        raise TypeError

    def fields(self, message: BaseModel) -> dict[str, Any] | None:
        """A copy of a plain message's fields (None for another), for :meth:`json`."""
        return dict(message.__dict__) if type(message) in self.plain else None

    def json(self, value: Any, inline_images: bool) -> bytes | None:
        """``value`` (a message, or a dict of a message's fields) as pydantic would write it;
        None where orjson cannot (an integer beyond 64 bits, a key that is not a string, a
        value of a type it does not know, a lone surrogate): the caller asks pydantic."""
        try:
            return orjson.dumps(value, default=self._defaults[inline_images], option=self.OPTIONS)
        except orjson.JSONEncodeError:
            return None
