"""One asyncio event loop, on its own thread, for every cluster's polls in the process.

An event loop costs descriptors of its own (an epoll instance and a self-pipe: 3 on Linux),
so a loop per cluster made 20,000 clusters need 60,000 descriptors before the first broker
connection. Here the loop is made once; a poll from any (scheduler) thread is handed to it and
waited for, so a cluster's descriptors are its broker connections and nothing else.
"""

from __future__ import annotations

import asyncio
import errno
import resource
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None

DESCRIPTOR_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})
"""The process (EMFILE) or the system (ENFILE) has no descriptor left."""

_on_descriptors_exhausted: Callable[[OSError], None] | None = None

MIN_CONNECT_SLOTS = 16
_connect_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary())


def connect_slots() -> asyncio.Semaphore:
    """Connects in progress at once on the running loop: a quarter of the descriptor limit.

    Thousands of clusters start their first polls together; unbounded, their connects (each a
    socket until it succeeds or fails) would take every descriptor at once even when most
    brokers refuse at once, and the exporter would stop for a moment's peak."""
    loop = asyncio.get_running_loop()
    slots = _connect_slots.get(loop)
    if slots is None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        limit = soft if soft != resource.RLIM_INFINITY else 1 << 20
        slots = asyncio.Semaphore(max(MIN_CONNECT_SLOTS, limit // 4))
        _connect_slots[loop] = slots
    return slots


def set_descriptors_exhausted_handler(handler: Callable[[OSError], None] | None) -> None:
    """Call `handler` when a connect fails for want of a file descriptor (`serve` stops with
    exit 2: a monitor that cannot open its connections would only report brokers as down).
    None: such a connect is an ordinary unreachable broker (one-shot commands)."""
    global _on_descriptors_exhausted
    _on_descriptors_exhausted = handler


def descriptors_exhausted(exc: OSError) -> None:
    handler = _on_descriptors_exhausted
    if handler is not None:
        handler(exc)


def shared_loop() -> asyncio.AbstractEventLoop:
    """The process's polling loop, started on first use (a daemon thread: it never keeps the
    process alive)."""
    global _loop, _thread
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="kafka-poll-loop",
                                      daemon=True)
            thread.start()
            _loop, _thread = loop, thread
        return _loop


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on the shared loop and wait for its result (or its exception)."""
    loop = shared_loop()
    if threading.current_thread() is _thread:
        coroutine.close()
        raise RuntimeError("run() from the polling loop itself would wait forever")
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()
