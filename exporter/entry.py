"""The console script's first code: signal handlers before any heavy import.

Until a command installs its own handling (`serve` notes signals and stops or reloads in its
main loop), a signal must neither kill the process with the kernel's default action nor raise
KeyboardInterrupt inside an import (where it can be swallowed): SIGTERM and SIGINT end the
process at once (nothing is running yet that needs a clean stop) with `serve`'s (and
`demo`'s) documented status 0, or for the other commands 130 for SIGINT (as Ctrl-C) and 143
for SIGTERM; SIGHUP is ignored by `serve` and `demo` (the configuration is about to be read
anyway). Only `signal`, `os`, `sys` and `gc` are imported here. The interpreter's own
start-up, before this runs, is out of reach.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from types import FrameType

EXIT_SIGTERM_BEFORE_START = 143
"""128 + SIGTERM, what a shell reports for a process ended by it (commands other than serve)."""


def _early_exit_status(signum: int, serving: bool) -> int:
    if serving:
        return 0
    return 130 if signum == signal.SIGINT else EXIT_SIGTERM_BEFORE_START


def install_early_handlers(argv: list[str]) -> None:
    serving = bool(argv) and argv[0] in ("serve", "demo")

    def _stop(signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGINT and not serving:
            os.write(2, b"kafka-txn-exporter: interrupted\n")  # as exporter.cli.main says
        os._exit(_early_exit_status(signum, serving))

    # SIGTERM last: once it is caught, the others are handled too (what the test waits for).
    if serving:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # An inherited "ignore" (a shell's background job, nohup) stands.
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)


YOUNG_COLLECTION_THRESHOLD = 100_000
"""Container objects allocated (net) between two young collections (CPython 3.11: 700)."""


def tune_garbage_collector() -> None:
    """Start a young collection after `YOUNG_COLLECTION_THRESHOLD` allocations.

    A poll's records live as long as the poll, so at CPython's default most of them are
    promoted before they die, and their count starts full collections; each walks every
    long-lived object, and a large cluster's per-partition maps are millions of them. Cycles
    are still collected, only later (benchmarks/RESULTS.md#garbage-collector)."""
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *gc.get_threshold()[1:])


def main() -> int:
    install_early_handlers(sys.argv[1:])
    tune_garbage_collector()
    from exporter.cli import main as cli_main

    return cli_main()
