"""Waiting in end-to-end tests: poll a condition until it holds, or fail naming what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


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
