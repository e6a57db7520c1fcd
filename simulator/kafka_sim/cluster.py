"""`SimCluster`: a simulated Kafka cluster on 127.0.0.1, driven from ordinary (test) threads.

The brokers' state and every socket live on one asyncio loop in a background daemon thread;
this facade is the only way in from other threads. Reads of `.state` from a test are fine for
assertions, but mutations must go through `.call(fn, *args)`, which runs `fn` on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kafka_sim.api import Dispatcher
from kafka_sim.faults import FaultKind, NetworkFaults
from kafka_sim.router import BrokerRouter
from kafka_sim.sasl import SUPPORTED_MECHANISMS, SaslAuthority, SaslUsers
from kafka_sim.server import BrokerListener, ClientAuth, ListenerSecurity, server_ssl_context
from kafka_sim.state import ClusterState
from kafka_sim.versions import PROFILES, VersionProfile

log = logging.getLogger(__name__)

T = TypeVar("T")

TICK_INTERVAL_SECONDS = 0.1
"""How often the loop lets the brokers' state advance (transaction timeouts, markers)."""

CONTROL_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class SimTls:
    """PEM files for TLS listeners; `client_auth` is Kafka's ssl.client.auth."""

    cert_file: str
    key_file: str
    ca_file: str | None = None
    client_auth: ClientAuth = "none"


class SimCluster:
    """A simulated cluster speaking Kafka's wire protocol, one TCP listener per broker."""

    def __init__(
        self,
        brokers: int = 3,
        node_ids: Sequence[int] | None = None,
        topics: Mapping[str, int] | None = None,
        broker_config: Mapping[str, str] | None = None,
        profile: str = "4.0",
        tls: SimTls | None = None,
        sasl_users: Mapping[str, str] | None = None,
        sasl_mechanisms: Sequence[str] = SUPPORTED_MECHANISMS,
        host: str = "127.0.0.1",
        ports: Sequence[int] | None = None,
        *,
        dispatcher: Dispatcher | None = None,
        profiles: Mapping[int, str] | None = None,
        sasl_authority: SaslAuthority | None = None,
    ) -> None:
        """`dispatcher` replaces the ClusterState (network-layer tests only). `profiles` gives
        single brokers another release than `profile` (a rolling upgrade in progress).
        `sasl_authority` replaces `sasl_users` (e.g. `kafka_sim.msk_iam.MskIamAuthority`)."""
        self._node_ids = list(node_ids) if node_ids is not None else list(range(1, brokers + 1))
        if not self._node_ids or len(set(self._node_ids)) != len(self._node_ids):
            raise ValueError(f"node ids must be distinct and non-empty: {self._node_ids}")
        self._ports = list(ports) if ports is not None else [0] * len(self._node_ids)
        if len(self._ports) != len(self._node_ids):
            raise ValueError("ports must give one port per broker")
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; known: {sorted(PROFILES)}")
        self._profile: VersionProfile = PROFILES[profile]
        self._profiles = dict(profiles or {})
        for broker_id, name in self._profiles.items():
            if broker_id not in self._node_ids:
                raise ValueError(f"profile for unknown broker {broker_id}")
            if name not in PROFILES:
                raise ValueError(f"unknown profile {name!r}; known: {sorted(PROFILES)}")
        self._topics = dict(topics or {})
        self._broker_config = dict(broker_config or {})
        self._tls = tls
        self._sasl_users = dict(sasl_users) if sasl_users is not None else None
        self._sasl_mechanisms = tuple(sasl_mechanisms)
        self._sasl_authority = sasl_authority
        self._host = host
        self._custom_dispatcher = dispatcher

        self._faults = NetworkFaults()
        self._listeners: dict[int, BrokerListener] = {}
        self._state: Any = None
        self._dispatcher: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tick_task: asyncio.Task[None] | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> SimCluster:
        if self._loop is not None:
            raise RuntimeError("SimCluster already started")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=self._run_loop, args=(loop,), name="kafka-sim-loop", daemon=True
        )
        self._thread.start()
        try:
            self._run(self._start_async())
        except BaseException:
            self.close()
            raise
        return self

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _start_async(self) -> None:
        # The state is created on the loop thread: it is confined to it from then on.
        self._state = self._custom_dispatcher or self._build_state()
        dispatcher = self._custom_dispatcher or BrokerRouter(self._state)
        self._dispatcher = dispatcher
        security = self._security()
        for node_id, port in zip(self._node_ids, self._ports, strict=True):
            listener = BrokerListener(
                broker_id=node_id,
                host=self._host,
                port=port,
                dispatcher=dispatcher,
                profile=PROFILES[self._profiles[node_id]]
                if node_id in self._profiles
                else self._profile,
                faults=self._faults,
                security=security,
            )
            self._listeners[node_id] = listener
            await listener.start()
        self._set_endpoints()
        for name, partitions in self._topics.items():
            self._state.create_topic(name, partitions)
        self._tick_task = asyncio.get_running_loop().create_task(self._tick_forever())

    def _build_state(self) -> ClusterState:
        return ClusterState(
            node_ids=self._node_ids,
            profile=self._profile,
            broker_config=self._broker_config,
            profiles=self._profiles,
        )

    def _security(self) -> ListenerSecurity:
        ssl_context = None
        if self._tls is not None:
            ssl_context = server_ssl_context(
                self._tls.cert_file, self._tls.key_file, self._tls.ca_file, self._tls.client_auth
            )
        sasl: SaslAuthority | None = self._sasl_authority
        if sasl is None and self._sasl_users is not None:
            sasl = SaslUsers(self._sasl_users, self._sasl_mechanisms)
        return ListenerSecurity(ssl_context=ssl_context, sasl=sasl)

    def _set_endpoints(self) -> None:
        """Tell the state where each broker listens (it answers Metadata/FindCoordinator)."""
        setter = getattr(self._state, "set_endpoints", None)
        if setter is not None:
            setter({node_id: (self._host, ln.port) for node_id, ln in self._listeners.items()})

    async def _tick_forever(self) -> None:
        tick = getattr(self._state, "tick", None)
        if tick is None:
            return
        while True:
            await asyncio.sleep(TICK_INTERVAL_SECONDS)
            try:
                tick()
            except Exception:
                log.exception("simulator state tick failed")

    def close(self) -> None:
        """Stop every listener and the loop, and join its thread (idempotent)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if thread.is_alive() and not loop.is_closed():
            with contextlib.suppress(Exception):
                self._run(self._stop_async())
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=CONTROL_TIMEOUT_SECONDS)
        self._loop = None
        self._thread = None

    async def _stop_async(self) -> None:
        if self._tick_task is not None:
            self._tick_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tick_task
            self._tick_task = None
        for listener in self._listeners.values():
            await listener.stop()

    def __enter__(self) -> SimCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- running things on the loop ----------------------------------------------------------

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("SimCluster is not running; call start()")
        return self._loop

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._require_loop()
        if threading.current_thread() is self._thread:
            raise RuntimeError("SimCluster control methods cannot be called from the loop thread")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        return future.result(timeout=CONTROL_TIMEOUT_SECONDS)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run `fn(*args, **kwargs)` on the loop thread and return its result (or raise)."""
        loop = self._require_loop()
        if threading.current_thread() is self._thread:
            return fn(*args, **kwargs)
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return future.result(timeout=CONTROL_TIMEOUT_SECONDS)

    # --- read-only views ---------------------------------------------------------------------

    @property
    def node_ids(self) -> list[int]:
        return list(self._node_ids)

    @property
    def endpoints(self) -> dict[int, tuple[str, int]]:
        return {node_id: (self._host, ln.port) for node_id, ln in self._listeners.items()}

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{host}:{port}" for host, port in self.endpoints.values())

    @property
    def security_protocol(self) -> str:
        """What a client must set as security_protocol for these listeners."""
        if self._sasl_users is not None or self._sasl_authority is not None:
            return "SASL_SSL" if self._tls is not None else "SASL_PLAINTEXT"
        return "SSL" if self._tls is not None else "PLAINTEXT"

    @property
    def state(self) -> Any:
        """The ClusterState (read it in tests; mutate it only through `call`)."""
        return self._state

    @property
    def router(self) -> Any:
        """The dispatcher every listener hands its requests to (a `BrokerRouter` over `state`,
        unless a custom dispatcher was given); tests may wrap its `handle` through `call`."""
        return self._dispatcher

    @property
    def clock(self) -> Any:
        return self._state.clock

    def broker_running(self, broker_id: int) -> bool:
        return self.call(lambda: self._listener(broker_id).running)

    def connection_count(self, broker_id: int) -> int:
        """Open client connections on one broker (to check that stop really drops them)."""
        return self.call(lambda: self._listener(broker_id).connection_count)

    def _listener(self, broker_id: int) -> BrokerListener:
        try:
            return self._listeners[broker_id]
        except KeyError:
            raise ValueError(f"no broker {broker_id}; brokers are {self._node_ids}") from None

    # --- control -----------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int = 1,
        configs: Mapping[str, str] | None = None,
    ) -> Any:
        return self.call(
            self._state.create_topic, name, partitions, replication_factor, dict(configs or {})
        )

    def stop_broker(self, broker_id: int, *, fenced: bool = True) -> None:
        """Close the broker's listener (connects are refused) and drop its connections.

        `fenced` False is a real `kill -9` before the controller fences the broker
        (docs/kafka-semantics.md#faults): Metadata still lists it and names it leader of its
        partitions until `fence_broker`."""
        listener = self._listener(broker_id)
        self._run(listener.stop())
        if fenced:
            self._set_broker_alive(broker_id, False)

    def fence_broker(self, broker_id: int) -> None:
        """The controller's fencing of a stopped broker: it leaves Metadata, its partitions
        fail over to live in-sync replicas."""
        self._set_broker_alive(broker_id, False)

    def start_broker(self, broker_id: int) -> None:
        """Listen again on the same port."""
        listener = self._listener(broker_id)
        dropper = getattr(self._state, "drop_fetch_sessions", None)
        if dropper is not None:
            self.call(dropper, broker_id)  # a restarted broker has no fetch sessions
        self._run(listener.start())
        self._set_broker_alive(broker_id, True)

    def _set_broker_alive(self, broker_id: int, alive: bool) -> None:
        setter = getattr(self._state, "set_broker_alive", None)
        if setter is not None:
            self.call(setter, broker_id, alive)

    def set_latency(
        self, ms: int, broker_id: int | None = None, api_key: int | None = None
    ) -> None:
        """Delay matching responses by `ms` of real time (0 removes the rule; rules add up)."""
        self.call(self._faults.set_latency, ms, broker_id, api_key)

    def fail_next_responses(
        self,
        kind: FaultKind,
        broker_id: int | None = None,
        api_key: int | None = None,
        count: int | None = 1,
    ) -> None:
        """Spoil the next `count` matching responses (None: all until `clear_faults`)."""
        self.call(self._faults.fail_next_responses, kind, broker_id, api_key, count)

    def omit_from_responses(
        self,
        seed: int,
        probability: float = 0.3,
        broker_id: int | None = None,
        api_key: int | None = None,
        count: int | None = None,
        keep: frozenset[str] = frozenset(),
    ) -> None:
        """Leave random array elements out of matching answers (kafka_sim.faults)."""
        self.call(
            self._faults.omit_from_responses, seed, probability, broker_id, api_key, count, keep
        )

    def rewrite_responses(
        self,
        rewrite: Callable[[Any], None],
        broker_id: int | None = None,
        api_key: int | None = None,
        count: int | None = 1,
    ) -> None:
        """Pass the next `count` matching answers (None: all until `clear_faults`) through
        `rewrite`, which changes a decoded copy in place (runs on the simulator's thread)."""
        self.call(self._faults.rewrite_responses, rewrite, broker_id, api_key, count)

    def clear_faults(self) -> None:
        """Remove every latency and response-fault rule."""
        self.call(self._faults.clear)

    # Pass-throughs to the brokers' logic (ClusterState), run on the loop thread.

    def move_partition_leader(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(self._state.move_partition_leader, *args, **kwargs)

    def move_transaction_coordinator(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(self._state.move_transaction_coordinator, *args, **kwargs)

    def block_markers(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(self._state.block_markers, *args, **kwargs)

    def inject_error(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(self._state.inject_error, *args, **kwargs)

    def clear_errors(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(self._state.clear_errors, *args, **kwargs)

    def deny_topic(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(self._state.deny_topic, *args, **kwargs)

    def deny_group(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(self._state.deny_group, *args, **kwargs)

    def deny_cluster(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(self._state.deny_cluster, *args, **kwargs)
