"""Waiting in end-to-end tests: poll a condition until it holds, or fail naming what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

SUBPROCESS_HANG_S = 600.0
"""How long a test lets a tool it runs (promtool, a benchmark, a JVM) take before calling it
hung. Not a timing: at load 15 on two cores a run that takes seconds when idle takes minutes."""


def wait_for(what: str, check: Callable[[], Any], timeout_seconds: float = 60.0) -> Any:
    """`check()`'s first truthy value, polled every 0.2 s; AssertionError after the timeout."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
