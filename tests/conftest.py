"""Shared test configuration: the anyio backend and the project's fixture plugins."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["tests.fixtures.broker"]

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def require(condition: bool, reason: str) -> None:
    """Skip with ``reason`` on a user's machine; fail in CI, where nothing may be skipped."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)
