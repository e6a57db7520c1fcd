"""The simulator's clock: real wall time plus an adjustable offset.

Tests advance it so that transaction ages of minutes or hours are reachable in seconds, while
Kafka clients talking to the simulator still see time moving forward at the normal rate.
"""

from __future__ import annotations

import time


class Clock:
    """Milliseconds since the epoch, = wall clock + offset; `advance` only ever moves it forward."""

    __slots__ = ("_offset_ms",)

    def __init__(self, start_ms: int | None = None) -> None:
        self._offset_ms = 0 if start_ms is None else start_ms - self._wall_ms()

    @staticmethod
    def _wall_ms() -> int:
        return time.time_ns() // 1_000_000

    def now_ms(self) -> int:
        return self._wall_ms() + self._offset_ms

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("the simulator clock only moves forward")
        self._offset_ms += ms


class ManualClock(Clock):
    """A clock that only moves when told to (`advance`, `set_ms`): for exact-value tests."""

    __slots__ = ("_now_ms",)

    def __init__(self, start_ms: int | None = None) -> None:
        super().__init__(None)
        self._now_ms = self._wall_ms() if start_ms is None else start_ms

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("the simulator clock only moves forward")
        self._now_ms += ms

    def set_ms(self, now_ms: int) -> None:
        if now_ms < self._now_ms:
            raise ValueError("the simulator clock only moves forward")
        self._now_ms = now_ms
