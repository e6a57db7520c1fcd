"""/metrics with the snapshot families formatted once per cluster and publish, not per scrape.

prometheus_client's text formatting costs ~10 us per sample (labels validated, escaped and
formatted): ~95 ms for 10,000 late transactions, although a cluster's series change only when
its poll publishes (benchmarks/RESULTS.md). So each `SnapshotCollector` is formatted in parts,
one per cluster plus one for the series of no cluster (build_info), and each part is cut into
one chunk of sample lines per family. A part is kept, per negotiated format, while its source
is the same object (every publish swaps in a new `ClusterState` for the cluster it polled and
the cache holds a reference, so an identity check cannot be fooled by a reused id). A scrape
joins, family by family, the family's `# HELP`/`# TYPE` header and every part's chunk: the
body `generate_latest` would give, but only the cluster that changed is formatted again.

gzip: each big cached chunk (a cluster's many late series, say) keeps its own gzip member,
made once; the small pieces between them (headers, most families' few series) are compressed
together, one member per run, kept while the run's pieces are the same. A gzip scrape with no
publish since the previous one joins cached members and compresses only what is rendered fresh
(process, platform and GC metrics, every other collector). Concatenated gzip members are one
valid gzip stream (RFC 1952 section 2.2; Go's gzip reader, which Prometheus uses, reads them
as one body), and the body is within a few percent of one gzip stream's size.

The collectors rendered on every scrape (process, platform and GC metrics) keep the same
families, labels and help text from one scrape to the next; only their values move. Their
render is kept as a template (`_FreshTemplate`): prometheus_client's own bytes with every
sample value cut out, made by rendering the families with marker values and checked against
a real render. A scrape collects them (their values are read fresh, as before) and, while the
families have the same shape, writes each value into the template with prometheus_client's
own float formatting; any other change renders them again.

A publish formats, on the poll's thread, the cluster it changed in the formats scrapers asked
for since that cluster's previous publish (`warm`), so the next scrape finds its bytes ready;
a format nobody asked for since is not formatted, and with no scraper a publish formats
nothing. Requests this does not speed up go to prometheus_client's own app unchanged:
`name[]` filters, methods other than GET, and registries with target_info.
"""

from __future__ import annotations

import copy
import gzip
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import make_wsgi_app
from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from exporter.expose.collector import SnapshotCollector
from exporter.expose.registry import ExporterRegistry
from exporter.logs import get_logger
from exporter.snapshots import ClusterState

Encoder = Callable[[Collector], bytes]
StartResponse = Callable[..., Any]

MAX_CACHED_FORMATS = 4
"""Formats kept per part. The Accept header picks the format (text 0.0.4, OpenMetrics with a
client-chosen version and escaping), so the bound keeps a client that cycles through versions
from holding one multi-MB body per variant."""
GZIP_LEVEL = 6
"""zlib's default: within a few percent of level 9's size at a fraction of its time."""
FRESH_GZIP_LEVEL = 1
"""For the few KB rendered on every scrape: level 6 would cost twice the time for ~10% less."""
BIG_CHUNK_BYTES = 16 * 1024
"""A cluster's sample lines of one family this big get a gzip member of their own, made once
per publish. The smaller pieces between two big ones (headers, the few series of most
families) are compressed together in one member, kept until one of them changes: one member
per small piece would make the body several times larger than one gzip stream."""

_OPENMETRICS_EOF = b"# EOF\n"
_HELP = b"# HELP "
_GLOBAL = ""  # the part of the series that belong to no cluster; cluster names are not empty
_log = get_logger("exporter.expose.render_cache")


def _is_openmetrics(content_type: str) -> bool:
    return content_type.startswith("application/openmetrics-text")


def _without_eof(body: bytes, openmetrics: bool) -> bytes:
    """OpenMetrics' generate_latest ends every render with `# EOF`; a body has exactly one."""
    if not openmetrics:
        return body
    assert body.endswith(_OPENMETRICS_EOF), "OpenMetrics render without # EOF"
    return body[: -len(_OPENMETRICS_EOF)]


def _gzip(data: bytes, level: int = GZIP_LEVEL) -> bytes:
    return gzip.compress(data, compresslevel=level, mtime=0)


class _Collectors(Collector):
    """Some collectors, or some families, as one collector for an encoder."""

    def __init__(self, collectors: Sequence[Collector] = (),
                 families: Sequence[Metric] = ()) -> None:
        self._collectors = collectors
        self._families = families

    def collect(self) -> Iterator[Metric]:
        for collector in self._collectors:
            yield from collector.collect()
        yield from self._families


def _split_families(body: bytes, families: int) -> tuple[list[bytes], list[bytes]]:
    """(headers, sample chunks) of each family of a render. Every family starts with its
    `# HELP` line in both formats, and sample lines never start with `#` (a label value's
    newline is escaped), so a family is everything from one `# HELP` line to the next."""
    starts = [0] if body.startswith(_HELP) else []
    pos = 0
    while (pos := body.find(b"\n" + _HELP, pos)) != -1:
        pos += 1
        starts.append(pos)
    if len(starts) != families:
        raise ValueError(f"expected {families} families in the render, found {len(starts)}")
    headers: list[bytes] = []
    chunks: list[bytes] = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(body)
        samples = start
        while samples < end and body.startswith(b"#", samples):  # HELP, TYPE (, UNIT)
            samples = body.index(b"\n", samples) + 1
        headers.append(body[start:samples])
        chunks.append(body[samples:end])
    return headers, chunks


@dataclass(slots=True)
class _Rendered:
    """One part in one format: each family's header and sample lines, and the gzip members of
    its big chunks once a gzip scrape asked for them."""

    headers: list[bytes]
    chunks: list[bytes]
    members: dict[int, bytes] = field(default_factory=dict)

    def member(self, family: int) -> bytes:
        """The gzip member of a big chunk, made once."""
        found = self.members.get(family)
        if found is None:
            found = self.members[family] = _gzip(self.chunks[family])
        return found

    def compress_big_chunks(self) -> None:
        for family, chunk in enumerate(self.chunks):
            if len(chunk) >= BIG_CHUNK_BYTES:
                self.member(family)


@dataclass(slots=True)
class _Part:
    source: object
    """What was rendered: the cluster's `ClusterState`, or the collector for the global part."""
    formats: dict[str, _Rendered]


def _remember(formats: dict[str, Any], content_type: str, value: Any) -> None:
    """Set `formats[content_type]`, dropping the oldest format beyond MAX_CACHED_FORMATS."""
    if content_type not in formats and len(formats) >= MAX_CACHED_FORMATS:
        del formats[next(iter(formats))]
    formats[content_type] = value


_Run = tuple[tuple[bytes, ...], bytes]
_float_text: Callable[[float], str] = floatToGoString
"""prometheus_client's own sample value formatting (both formats use it)."""
_Shape = tuple[tuple[object, ...], ...]


def _shape(families: Sequence[Metric]) -> _Shape | None:
    """Everything of `families` a render shows except sample values; None when a sample has
    a timestamp, exemplar or native histogram (rendered from more than its value)."""
    shape: list[tuple[object, ...]] = []
    for family in families:
        samples: list[tuple[str, tuple[tuple[str, str], ...]]] = []
        for sample in family.samples:
            if (sample.timestamp is not None or sample.exemplar is not None
                    or sample.native_histogram is not None):
                return None
            samples.append((sample.name, tuple(sample.labels.items())))
        shape.append((family.name, family.documentation, family.type, family.unit,
                      tuple(samples)))
    return tuple(shape)


def _marker(index: int) -> float:
    """A value whose rendering is unique, of one length, and no real metric's."""
    return float(f"-9.87654321{index:04d}7e-300")


@dataclass(frozen=True, slots=True)
class _FreshTemplate:
    """An encoder's render of families of one shape, cut at each sample value: `pieces[0]`,
    then the value of sample `order[0]`, `pieces[1]`, and so on."""

    shape: _Shape
    pieces: tuple[str, ...]
    order: tuple[int, ...]

    def fill(self, values: Sequence[float]) -> bytes:
        out = [self.pieces[0]]
        for index, piece in zip(self.order, self.pieces[1:], strict=True):
            out.append(_float_text(values[index]))
            out.append(piece)
        return "".join(out).encode("utf-8")


def _make_template(families: Sequence[Metric], shape: _Shape, encoder: Encoder,
                   values: Sequence[float], real: bytes) -> _FreshTemplate | None:
    """The template of `families`, or None if the marker render cannot be cut cleanly or the
    filled template is not byte for byte `real` (the encoder's render of the families)."""
    if len(values) > 9_999:
        return None
    marked: list[Metric] = []
    index = 0
    for family in families:
        clone = copy.copy(family)
        clone.samples = []
        for sample in family.samples:
            clone.samples.append(sample._replace(value=_marker(index)))
            index += 1
        marked.append(clone)
    text = encoder(_Collectors(families=marked)).decode("utf-8")
    found: list[tuple[int, int]] = []
    for i in range(len(values)):
        marker = _float_text(_marker(i))
        at = text.find(marker)
        if at == -1 or text.find(marker, at + 1) != -1:
            return None
        found.append((at, i))
    found.sort()
    width = len(_float_text(_marker(0)))
    pieces: list[str] = []
    start = 0
    for at, _ in found:
        pieces.append(text[start:at])
        start = at + width
    pieces.append(text[start:])
    template = _FreshTemplate(shape, tuple(pieces), tuple(i for _, i in found))
    return template if template.fill(values) == real else None


class SnapshotRenderCache:
    """Formatted parts of each SnapshotCollector, per format, valid while their source is."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: dict[tuple[SnapshotCollector, str], _Part] = {}
        # collector -> {content type: [(the pieces of a run of small pieces, their member)]}
        self._runs: dict[SnapshotCollector, dict[str, list[_Run]]] = {}
        # (collector, content type) -> (the parts of the last gzip body, its members)
        self._bodies: dict[tuple[SnapshotCollector, str], tuple[tuple[_Rendered, ...],
                                                                list[bytes]]] = {}
        # cluster -> {content type: (encoder, gzip)} asked for since that cluster's last publish
        self._wanted: dict[str, dict[str, tuple[Encoder, bool]]] = {}
        # (content type, ids of the fresh collectors) -> the template of their last render
        self._fresh: dict[tuple[str, tuple[int, ...]], _FreshTemplate] = {}

    # ---------------------------------------------------------------- fresh collectors
    def fresh_render(self, collectors: Sequence[Collector], encoder: Encoder,
                     content_type: str) -> bytes:
        """`encoder` over `collectors`, collected now: their values written into the template
        of their previous render while the families keep its shape, else rendered."""
        families = [family for collector in collectors for family in collector.collect()]
        shape = _shape(families)
        if shape is None:
            return encoder(_Collectors(families=families))
        values = [sample.value for family in families for sample in family.samples]
        key = (content_type, tuple(map(id, collectors)))
        with self._lock:
            template = self._fresh.get(key)
        if template is not None and template.shape == shape:
            return template.fill(values)
        body = encoder(_Collectors(families=families))
        template = _make_template(families, shape, encoder, values, body)
        if template is not None:
            with self._lock:
                self._fresh.pop(key, None)
                if len(self._fresh) >= 2 * MAX_CACHED_FORMATS:
                    del self._fresh[next(iter(self._fresh))]
                self._fresh[key] = template
        return body

    # ---------------------------------------------------------------- scrape
    def snapshot_body(
        self, collector: SnapshotCollector, encoder: Encoder, content_type: str, gz: bool
    ) -> list[bytes]:
        """The collector's families in `content_type` (without `# EOF`), as pieces to join;
        gzip members when `gz`. Parts not cached for the current states are formatted now."""
        states = collector.published_states()
        sources: list[tuple[str, object]] = [(_GLOBAL, collector)]
        sources += [(name, state) for name, state in states.items()]
        # One hold of the lock for every cluster's cached part: with thousands of clusters, a
        # hold per cluster queued this scrape behind every publish's.
        with self._lock:
            for name, _ in sources[1:]:
                wanted = self._wanted.setdefault(name, {})
                was_gz = wanted.get(content_type, (encoder, False))[1]
                _remember(wanted, content_type, (encoder, gz or was_gz))
            cached = [self._cached(collector, name, source, content_type)
                      for name, source in sources]
        rendered = [
            part if part is not None
            else self._rendered(collector, name, source, encoder, content_type)
            for (name, source), part in zip(sources, cached, strict=True)
        ]
        if gz:
            return self._gzip_members(collector, content_type, rendered)
        out: list[bytes] = []
        for i, header in enumerate(rendered[0].headers):
            out.append(header)
            out.extend(r.chunks[i] for r in rendered if r.chunks[i])
        return out

    def _gzip_members(self, collector: SnapshotCollector, content_type: str,
                      rendered: list[_Rendered]) -> list[bytes]:
        """The body as gzip members: big chunks' own, and one per run of small pieces, each
        reused while its pieces are the same objects (identity, as for the parts)."""
        with self._lock:
            last = self._bodies.get((collector, content_type))
        if last is not None and len(last[0]) == len(rendered) and all(
            a is b for a, b in zip(last[0], rendered, strict=True)
        ):
            return last[1]  # no part changed since the previous gzip scrape
        with self._lock:
            runs = self._runs.setdefault(collector, {})
            cached = runs.get(content_type, [])
        fresh_runs: list[_Run] = []
        out: list[bytes] = []
        run: list[bytes] = []

        def close_run() -> None:
            if not run:
                return
            pieces = tuple(run)
            n = len(fresh_runs)
            if n < len(cached) and len(cached[n][0]) == len(pieces) and all(
                a is b for a, b in zip(cached[n][0], pieces, strict=True)
            ):
                member = cached[n][1]
            else:
                member = _gzip(b"".join(pieces))
            fresh_runs.append((pieces, member))
            out.append(member)
            run.clear()

        for i, header in enumerate(rendered[0].headers):
            run.append(header)
            for part in rendered:
                chunk = part.chunks[i]
                if len(chunk) >= BIG_CHUNK_BYTES:
                    close_run()
                    out.append(part.member(i))
                elif chunk:
                    run.append(chunk)
        close_run()
        with self._lock:
            _remember(runs, content_type, fresh_runs)
            if len(self._bodies) >= 2 * MAX_CACHED_FORMATS:
                del self._bodies[next(iter(self._bodies))]
            self._bodies[(collector, content_type)] = (tuple(rendered), out)
        return out

    def _cached(self, collector: SnapshotCollector, name: str, source: object,
                content_type: str) -> _Rendered | None:
        """The part formatted for `source` in `content_type`, if kept (the lock held)."""
        part = self._parts.get((collector, name))
        if part is not None and part.source is source:
            return part.formats.get(content_type)
        return None

    def _rendered(self, collector: SnapshotCollector, name: str, source: object,
                  encoder: Encoder, content_type: str) -> _Rendered:
        key = (collector, name)
        with self._lock:
            kept = self._cached(collector, name, source, content_type)
        if kept is not None:
            return kept
        if isinstance(source, ClusterState):
            families = collector.cluster_families(source)
        else:
            families = collector.global_families()
        body = _without_eof(encoder(_Collectors(families=families)),
                            _is_openmetrics(content_type))
        headers, chunks = _split_families(body, len(families))
        rendered = _Rendered(headers, chunks)
        with self._lock:
            part = self._parts.get(key)
            if part is None or part.source is not source:
                part = self._parts[key] = _Part(source, {})
            _remember(part.formats, content_type, rendered)
        return rendered

    # ---------------------------------------------------------------- publish
    def warm(self, registry: ExporterRegistry, cluster: str | None = None) -> None:
        """After a publish of `cluster`: format it in the formats scraped since its previous
        publish (and gzip them if those scrapes asked for gzip). Only that cluster is looked
        at: with thousands of clusters, a walk over all of them at every publish cost more
        than the scrapes. None (the clusters changed): every cluster, and the parts of
        clusters no longer configured are forgotten."""
        for collector in registry.collectors():
            if not isinstance(collector, SnapshotCollector):
                continue
            if cluster is None:
                changed = list(collector.published_states().items())
            else:
                state = collector.published_state(cluster)
                changed = [] if state is None else [(cluster, state)]
            for name, state in changed:
                with self._lock:
                    part = self._parts.get((collector, name))
                    if part is not None and part.source is state:
                        continue  # unchanged (or already formatted by a scrape)
                    wanted = self._wanted.pop(name, {})
                for content_type, (encoder, gz) in wanted.items():
                    try:
                        rendered = self._rendered(collector, name, state, encoder, content_type)
                        if gz:
                            rendered.compress_big_chunks()
                    except Exception:  # the scrape formats it itself; never fail the publish
                        _log.warning("metrics_prerender_failed", content_type=content_type,
                                     exc_info=True)
        if cluster is not None:
            return
        with self._lock:  # forget clusters no longer configured
            live = {(c, n) for c in registry.collectors() if isinstance(c, SnapshotCollector)
                    for n in (_GLOBAL, *c.published_states())}
            for key in [k for k in self._parts if k not in live]:
                del self._parts[key]


def render_registry(
    registry: ExporterRegistry, cache: SnapshotRenderCache, accept: str | None,
    gz: bool = False,
) -> tuple[bytes, str]:
    """(body, content type) for `accept`: what `generate_latest` would give (gzip-compressed
    when `gz`), with the snapshot collectors' parts from `cache` and every other collector
    collected now."""
    encoder, content_type = choose_encoder(accept or "")
    openmetrics = _is_openmetrics(content_type)
    pieces: list[bytes] = []
    fresh: list[Collector] = []

    def flush(tail: bytes = b"") -> None:
        data = (_without_eof(cache.fresh_render(fresh, encoder, content_type), openmetrics)
                if fresh else b"") + tail
        fresh.clear()
        if data:
            pieces.append(_gzip(data, FRESH_GZIP_LEVEL) if gz else data)

    for collector in registry.collectors():
        if isinstance(collector, SnapshotCollector):
            flush()
            pieces.extend(cache.snapshot_body(collector, encoder, content_type, gz))
        else:
            fresh.append(collector)
    flush(_OPENMETRICS_EOF if openmetrics else b"")
    if gz and not pieces:
        pieces.append(_gzip(b""))
    return b"".join(pieces), content_type


def make_metrics_app(
    registry: ExporterRegistry, cache: SnapshotRenderCache | None = None
) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """A WSGI app for /metrics: same answers as prometheus_client's `make_wsgi_app(registry)`,
    with the snapshot families formatted once per cluster and publish."""
    fallback = make_wsgi_app(registry)
    render_cache = SnapshotRenderCache() if cache is None else cache

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        query = environ.get("QUERY_STRING")
        if (
            environ.get("REQUEST_METHOD") != "GET"
            or (query and "name[]" in parse_qs(query))
            or registry.get_target_info()
        ):
            result: Iterable[bytes] = fallback(environ, start_response)
            return result
        gz = gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING") or "")
        body, content_type = render_registry(registry, render_cache, environ.get("HTTP_ACCEPT"),
                                             gz)
        headers = [("Content-Type", content_type)]
        if gz:
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

    return app
