"""Root of the test tree. Its presence puts tests/ on sys.path (pytest's default "prepend"
import mode), so test modules in any sub-folder import the shared helpers (simhelpers,
exporter_factories) however pytest was started."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def reset_logging() -> Iterator[None]:
    """After the test, structlog and the root logger as before any `configure_logging`: a
    command run in process configures logging onto its own streams, which later tests would
    otherwise write to."""
    yield
    import logging

    import structlog

    structlog.reset_defaults()
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
