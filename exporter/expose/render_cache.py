"""/metrics with the snapshot families rendered once per published state, not once per scrape.

prometheus_client's text formatting costs ~10 us per sample (labels validated, escaped and
formatted): ~95 ms for 10,000 late transactions, on every scrape, although the snapshot
families change only when a poll publishes (benchmarks/RESULTS.md section 5, issue 9). Here
each `SnapshotCollector`'s exposition bytes are kept per negotiated format and reused while its
`published_states()` is the same object (every publish swaps in a new one, and the cache holds
a reference, so an identity check cannot be fooled by a reused id). Every other collector
(process, platform, GC) is rendered fresh on every scrape. Parts are concatenated in
registration order, so the body is the one `generate_latest` would give; in OpenMetrics each
part's `# EOF` is dropped and one is appended at the end. gzip is applied to the whole body.

A publish also re-renders, on the poll's thread, the formats scrapers asked for since the
previous one (`warm`), so the first scrape after a poll finds its bytes ready too; formats
nobody scrapes cost nothing.

Requests this does not speed up go to prometheus_client's own app unchanged: `name[]`
filters, methods other than GET, and registries with target_info.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import make_wsgi_app
from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector

from exporter.expose.collector import SnapshotCollector
from exporter.expose.registry import ExporterRegistry
from exporter.logs import get_logger
from exporter.snapshots import ClusterState

Encoder = Callable[[Collector], bytes]
StartResponse = Callable[..., Any]

MAX_CACHED_FORMATS = 4
"""Formats kept per collector. The Accept header picks the format (text 0.0.4, OpenMetrics
with a client-chosen version and escaping), so the bound keeps a client that cycles through
versions from holding one multi-MB body per variant."""

_OPENMETRICS_EOF = b"# EOF\n"
_log = get_logger("exporter.expose.render_cache")


def _is_openmetrics(content_type: str) -> bool:
    return content_type.startswith("application/openmetrics-text")


def _without_eof(body: bytes, openmetrics: bool) -> bytes:
    """OpenMetrics' generate_latest ends every render with `# EOF`; a body has exactly one."""
    if not openmetrics:
        return body
    assert body.endswith(_OPENMETRICS_EOF), "OpenMetrics render without # EOF"
    return body[: -len(_OPENMETRICS_EOF)]


class _Collectors(Collector):
    """Some of a registry's collectors, as one collector for an encoder."""

    def __init__(self, collectors: Sequence[Collector]) -> None:
        self._collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self._collectors:
            yield from collector.collect()


class SnapshotRenderCache:
    """Exposition bytes of each SnapshotCollector per format, valid for one published state."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # collector -> (the published states rendered, {content type: body without # EOF})
        self._entries: dict[
            SnapshotCollector, tuple[Mapping[str, ClusterState], dict[str, bytes]]
        ] = {}
        self._encoders: dict[str, Encoder] = {}

    def render(self, collector: SnapshotCollector, encoder: Encoder, content_type: str) -> bytes:
        """The collector's families in `content_type`, without `# EOF`; rendered on a miss."""
        states = collector.published_states()
        with self._lock:
            entry = self._entries.get(collector)
            if entry is not None and entry[0] is states and content_type in entry[1]:
                return entry[1][content_type]
        body = _without_eof(encoder(_Collectors([collector])), _is_openmetrics(content_type))
        with self._lock:
            self._encoders[content_type] = encoder
            # Keep it only if no publish happened since `states` was read: then the render saw
            # exactly `states` (a publish always makes a new object), never something older.
            if collector.published_states() is states:
                entry = self._entries.get(collector)
                if entry is None or entry[0] is not states:
                    entry = self._entries[collector] = (states, {})
                bodies = entry[1]
                if content_type not in bodies and len(bodies) >= MAX_CACHED_FORMATS:
                    del bodies[next(iter(bodies))]  # the oldest format
                bodies[content_type] = body
        return body


    def warm(self, registry: ExporterRegistry) -> None:
        """Render the new state of every SnapshotCollector in the formats cached before."""
        for collector in _registered_collectors(registry):
            if not isinstance(collector, SnapshotCollector):
                continue
            with self._lock:
                entry = self._entries.get(collector)
                wanted = [(ct, self._encoders[ct]) for ct in entry[1]] if entry else []
            for content_type, encoder in wanted:
                try:
                    self.render(collector, encoder, content_type)
                except Exception:  # the scrape renders it itself; never fail the publish
                    _log.warning("metrics_prerender_failed", content_type=content_type,
                                 exc_info=True)


def _registered_collectors(registry: ExporterRegistry) -> list[Collector]:
    return registry.collectors()


def render_registry(
    registry: ExporterRegistry, cache: SnapshotRenderCache, accept: str | None
) -> tuple[bytes, str]:
    """(body, content type) for `accept`: what `generate_latest` would give, with the
    snapshot collectors' parts from `cache` and every other collector collected now."""
    encoder, content_type = choose_encoder(accept or "")
    openmetrics = _is_openmetrics(content_type)
    parts: list[bytes] = []
    fresh: list[Collector] = []
    for collector in _registered_collectors(registry):
        if isinstance(collector, SnapshotCollector):
            if fresh:
                parts.append(_without_eof(encoder(_Collectors(fresh)), openmetrics))
                fresh = []
            parts.append(cache.render(collector, encoder, content_type))
        else:
            fresh.append(collector)
    if fresh:
        parts.append(_without_eof(encoder(_Collectors(fresh)), openmetrics))
    if openmetrics:
        parts.append(_OPENMETRICS_EOF)
    return b"".join(parts), content_type


def make_metrics_app(
    registry: ExporterRegistry, cache: SnapshotRenderCache | None = None
) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """A WSGI app for /metrics: same answers as prometheus_client's `make_wsgi_app(registry)`,
    with the snapshot families rendered once per published state."""
    fallback = make_wsgi_app(registry)
    render_cache = SnapshotRenderCache() if cache is None else cache

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if (
            environ.get("REQUEST_METHOD") != "GET"
            or "name[]" in parse_qs(environ.get("QUERY_STRING", ""))
            or registry.get_target_info()
        ):
            result: Iterable[bytes] = fallback(environ, start_response)
            return result
        body, content_type = render_registry(registry, render_cache, environ.get("HTTP_ACCEPT"))
        headers = [("Content-Type", content_type)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING") or ""):
            body = gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

    return app
