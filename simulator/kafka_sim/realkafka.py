"""Real Apache Kafka on loopback: the judge the simulator answers to.

Starts KRaft brokers from the jars `scripts/install-kafka` resolved from Maven Central (one
combined broker+controller, or three combined nodes for fault tests), or ZooKeeper-mode brokers
of the releases before 4.0 with a ZooKeeper server of their own (the one their kafka_2.13
depends on); runs Kafka's own tools from the same jars, and reads the brokers' JMX gauges with
Kafka's JmxTool. Every process runs in a session of its own, dies with the Python process that
started it (PR_SET_PDEATHSIG) and is stopped, whole group, by `stop()`.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import functools
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
import zipfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

_PR_SET_PDEATHSIG = 1

_LOG4J1 = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
"""

_LOG4J2 = """\
Configuration:
  Appenders:
    File:
      name: file
      fileName: "{log}"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: file
    Logger:
      - name: kafka.request.logger
        level: WARN
      - name: state.change.logger
        level: WARN
"""

_TOOL_LOG4J = """\
Configuration:
  Appenders:
    Console:
      name: err
      target: SYSTEM_ERR
      PatternLayout:
        pattern: "%p %m%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: err
"""


_TOOL_LOG4J1 = """\
log4j.rootLogger=WARN, err
log4j.appender.err=org.apache.log4j.ConsoleAppender
log4j.appender.err.Target=System.err
log4j.appender.err.layout=org.apache.log4j.PatternLayout
log4j.appender.err.layout.ConversionPattern=%p %m%n
"""


_TOOL_LOGGING_LOCK = threading.Lock()


class KafkaNotInstalled(RuntimeError):
    """The version's jars are not in the cache: `scripts/install-kafka VERSION` installs them."""


def kafka_home() -> Path:
    """The cache `scripts/install-kafka` fills (same rule as the script)."""
    explicit = os.environ.get("KTE_KAFKA_HOME")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "kafka-txn-exporter" / "kafka"


def jmx_agent_jar() -> Path:
    agent = kafka_home() / "loopback-jmx-agent.jar"
    if not agent.exists():
        raise KafkaNotInstalled(f"{agent} is missing: run scripts/install-kafka")
    return agent


def java_command() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaNotInstalled("no java on PATH: scripts/install-kafka installs Java 17")
    return found


@dataclass(frozen=True)
class KafkaInstall:
    """One installed Kafka version: its jars, and how to run a main class from them."""

    version: str
    lib: Path

    @classmethod
    def find(cls, version: str) -> KafkaInstall:
        home = kafka_home() / version
        if not (home / "complete").exists():
            raise KafkaNotInstalled(
                f"Kafka {version} is not installed in {home}: run scripts/install-kafka {version}"
            )
        return cls(version=version, lib=home / "lib")

    def has_class(self, class_name: str) -> bool:
        """Whether one of the version's jars holds `class_name` (tools moved between jars and
        packages over the releases: JmxTool, ConsumerGroupCommand, ConsoleConsumer...)."""
        return _has_class(self.lib, class_name.replace(".", "/") + ".class")

    def tool_class(self, *candidates: str) -> str:
        """The first of `candidates` (newest name first) this version ships."""
        for candidate in candidates:
            if self.has_class(candidate):
                return candidate
        raise KafkaNotInstalled(f"Kafka {self.version} has none of {', '.join(candidates)}")

    @property
    def major_minor(self) -> tuple[int, int]:
        major, minor = self.version.split(".")[:2]
        return int(major), int(minor)

    def java_args(self, main_class: str, *args: str, jvm: Sequence[str] = ()) -> list[str]:
        return [java_command(), *jvm, "-cp", f"{self.lib}/*", main_class, *args]

    def run_tool(
        self, main_class: str, *args: str, timeout: float = 120.0, workdir: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run one of Kafka's command-line tools (the class its bin/*.sh script runs)."""
        jvm: list[str] = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
        if workdir is not None:
            log2 = workdir / "tool-log4j2.yaml"
            log1 = workdir / "tool-log4j.properties"
            with _TOOL_LOGGING_LOCK:  # tools may start from several threads at once
                if not log2.exists():
                    log1.write_text(_TOOL_LOG4J1)
                    log2.write_text(_TOOL_LOG4J)
            jvm += [f"-Dlog4j2.configurationFile={log2}", f"-Dlog4j.configuration=file:{log1}"]
        return subprocess.run(
            self.java_args(main_class, *args, jvm=jvm),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )


@functools.cache
def _jar_entries(jar: Path) -> frozenset[str]:
    with zipfile.ZipFile(jar) as archive:
        return frozenset(archive.namelist())


def _has_class(lib: Path, entry: str) -> bool:
    return any(
        entry in _jar_entries(jar)
        for jar in sorted(lib.glob("*.jar"))
        if jar.name.startswith(("kafka", "zookeeper"))
    )


_ISSUED_PORTS: set[int] = set()


def _ephemeral_low() -> int:
    """The lowest port the kernel gives outgoing connections (Linux: ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, below the kernel's ephemeral range where it can: a JVM
    binds its listeners many seconds after the port is chosen (longer on a loaded machine),
    and a broker restarted on its port needs it again, while every outgoing connection of the
    machine takes a local port from the ephemeral range in the meantime."""
    low = _ephemeral_low()
    candidates = random.sample(range(10000, low), min(200, max(0, low - 10000)))
    for port in candidates:
        if port in _ISSUED_PORTS:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _ISSUED_PORTS.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        chosen: int = s.getsockname()[1]
        return chosen


def _die_with_parent() -> None:
    """Runs in the child before exec: a new session, and SIGKILL when the parent dies."""
    os.setsid()
    with contextlib.suppress(OSError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass
class Listener:
    """A client listener besides PLAINTEXT: name, security protocol and its own port per node."""

    name: str
    protocol: str
    advertised_host: str = "127.0.0.1"
    """The host name clients are told (it binds 127.0.0.1 either way): `localhost` for a
    Kerberos listener, whose service principal names the host."""


@dataclass
class _Node:
    node_id: int
    port: int
    controller_port: int
    jmx_port: int
    extra_ports: dict[str, int]
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.directory / "server.log"


@dataclass
class RealKafkaCluster:
    """A KRaft cluster of `nodes` combined broker+controller nodes on free loopback ports.

    With `zookeeper`, the nodes are ZooKeeper-mode brokers (releases before 4.0) registered in a
    ZooKeeper server of their own on a free loopback port (ZooKeeperServerMain, admin server and
    four-letter words off), started first and stopped last.

    `broker_config` is added to (and overrides) every node's server.properties;
    `listeners` adds client listeners (SASL_SSL, ...) beside PLAINTEXT, whose security settings go
    in `broker_config`; `jvm_options` reach every broker JVM (a JAAS file, say).
    """

    install: KafkaInstall
    workdir: Path
    nodes: int = 1
    broker_config: Mapping[str, str] = field(default_factory=dict)
    listeners: Sequence[Listener] = ()
    jvm_options: Sequence[str] = ()
    heap: str = "512m"
    cluster_id: str = ""
    zookeeper: bool = False
    _nodes: list[_Node] = field(default_factory=list, init=False)
    _zookeeper_port: int = field(default=0, init=False)
    _zookeeper_process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.zookeeper:
            self._zookeeper_port = free_port()
        self.cluster_id = self.cluster_id or _kraft_cluster_id()
        for index in range(self.nodes):
            node_id = index + 1
            directory = self.workdir / f"node-{node_id}"
            self._nodes.append(
                _Node(
                    node_id=node_id,
                    port=free_port(),
                    controller_port=free_port(),
                    jmx_port=free_port(),
                    extra_ports={listener.name: free_port() for listener in self.listeners},
                    directory=directory,
                )
            )

    # -- addresses -----------------------------------------------------------------------
    @property
    def node_ids(self) -> list[int]:
        return [n.node_id for n in self._nodes]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self._nodes)

    def port(self, node_id: int = 1, listener: str = "PLAINTEXT") -> int:
        node = self._node(node_id)
        return node.port if listener == "PLAINTEXT" else node.extra_ports[listener]

    def bootstrap_for(self, listener: str) -> str:
        return ",".join(f"127.0.0.1:{self.port(n.node_id, listener)}" for n in self._nodes)

    def jmx_url(self, node_id: int = 1) -> str:
        port = self._node(node_id).jmx_port
        return f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi"

    def log_text(self, node_id: int = 1) -> str:
        path = self._node(node_id).log_file
        return path.read_text(errors="replace") if path.exists() else ""

    def log_dir(self, node_id: int = 1) -> Path:
        """The node's `log.dirs`: a partition's segments are in `<topic>-<partition>/`."""
        return self._node(node_id).directory / "data"

    def _node(self, node_id: int) -> _Node:
        for node in self._nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(node_id)

    # -- life cycle ----------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> RealKafkaCluster:
        self.launch()
        for node in self._nodes:
            self.wait_started(node.node_id, timeout)
        return self

    def launch(self) -> None:
        """Format and launch every node without waiting (then `wait_started`), so that several
        clusters boot at once. Call it from the thread that will stop them: the JVMs die with
        the thread that launched them (PR_SET_PDEATHSIG)."""
        if self.zookeeper:
            self._start_zookeeper()
            for node in self._nodes:
                self._write_configs(node)
                self._launch(node)
            return
        # Each format is a JVM start (seconds on a loaded machine): the nodes' in parallel.
        # (The formats end before their threads do, so PR_SET_PDEATHSIG does not touch them.)
        with ThreadPoolExecutor(max_workers=len(self._nodes)) as pool:
            list(pool.map(self._format, self._nodes))
        for node in self._nodes:
            self._launch(node)

    @property
    def zookeeper_connect(self) -> str:
        return f"127.0.0.1:{self._zookeeper_port}"

    def _start_zookeeper(self, timeout: float = 120.0) -> None:
        """ZooKeeper's own standalone server (from the zookeeper jar kafka_2.13 depends on),
        until its client port accepts connections."""
        directory = self.workdir / "zookeeper"
        (directory / "data").mkdir(parents=True, exist_ok=True)
        config = directory / "zoo.cfg"
        config.write_text(
            f"dataDir={directory / 'data'}\n"
            f"clientPort={self._zookeeper_port}\n"
            "clientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\n"
            "tickTime=2000\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=\n"
        )
        log = directory / "zookeeper.log"
        (directory / "log4j.properties").write_text(_LOG4J1.format(log=log))
        jvm = [
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-Dzookeeper.admin.enableServer=false",
            f"-Dlog4j.configuration=file:{directory / 'log4j.properties'}",
        ]
        with open(directory / "stdout.log", "ab") as out:
            self._zookeeper_process = subprocess.Popen(
                self.install.java_args(
                    "org.apache.zookeeper.server.ZooKeeperServerMain", str(config), jvm=jvm
                ),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + timeout
        while not _accepts(self._zookeeper_port):
            if self._zookeeper_process.poll() is not None:
                raise RuntimeError(
                    f"ZooKeeper exited with {self._zookeeper_process.returncode}: "
                    f"{log.read_text(errors='replace')[-3000:] if log.exists() else ''}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"ZooKeeper did not start in {timeout} s")
            time.sleep(0.2)

    def _zookeeper_properties(self, node: _Node) -> dict[str, str]:
        listeners = [f"PLAINTEXT://127.0.0.1:{node.port}"]
        protocol_map = ["PLAINTEXT:PLAINTEXT"]
        for listener in self.listeners:
            port = node.extra_ports[listener.name]
            listeners.append(f"{listener.name}://127.0.0.1:{port}")
            protocol_map.append(f"{listener.name}:{listener.protocol}")
        replication = str(min(3, self.nodes))
        props = {
            "broker.id": str(node.node_id),
            "zookeeper.connect": self.zookeeper_connect,
            "zookeeper.connection.timeout.ms": "60000",
            "zookeeper.session.timeout.ms": "30000",
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(listeners),
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(protocol_map),
            **self._log_properties(node, replication),
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "log.segment.bytes": str(16 * 1024 * 1024),
        }
        props.update(self.broker_config)
        return props

    @staticmethod
    def _log_properties(node: _Node, replication: str) -> dict[str, str]:
        """What every broker of the rig sets alike, KRaft or ZooKeeper: its log directory and
        the internal topics' sizes."""
        return {
            "log.dirs": str(node.directory / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": replication,
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
        }

    def _properties(self, node: _Node) -> dict[str, str]:
        if self.zookeeper:
            return self._zookeeper_properties(node)
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self._nodes)
        listeners = [f"PLAINTEXT://127.0.0.1:{node.port}"]
        advertised = [f"PLAINTEXT://127.0.0.1:{node.port}"]
        protocol_map = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
        for listener in self.listeners:
            port = node.extra_ports[listener.name]
            listeners.append(f"{listener.name}://127.0.0.1:{port}")
            advertised.append(f"{listener.name}://{listener.advertised_host}:{port}")
            protocol_map.append(f"{listener.name}:{listener.protocol}")
        listeners.append(f"CONTROLLER://127.0.0.1:{node.controller_port}")
        replication = str(min(3, self.nodes))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(protocol_map),
            **self._log_properties(node, replication),
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "log.segment.bytes": str(16 * 1024 * 1024),
        }
        props.update(self.broker_config)
        return props

    def _write_configs(self, node: _Node) -> Path:
        node.directory.mkdir(parents=True, exist_ok=True)
        props_file = node.directory / "server.properties"
        props_file.write_text(
            "".join(f"{key}={value}\n" for key, value in self._properties(node).items())
        )
        (node.directory / "log4j.properties").write_text(_LOG4J1.format(log=node.log_file))
        (node.directory / "log4j2.yaml").write_text(_LOG4J2.format(log=node.log_file))
        return props_file

    def _format(self, node: _Node) -> None:
        props_file = self._write_configs(node)
        result = self.install.run_tool(
            "kafka.tools.StorageTool",
            "format",
            "-t",
            self.cluster_id,
            "-c",
            str(props_file),
            "--ignore-formatted",
            workdir=self.workdir,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"formatting KRaft storage of node {node.node_id} failed: "
                f"{(result.stdout + result.stderr)[-2000:]}"
            )

    def _launch(self, node: _Node) -> None:
        jvm = [
            f"-Xmx{self.heap}",
            f"-Xms{self.heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j.configuration=file:{node.directory / 'log4j.properties'}",
            f"-Dlog4j2.configurationFile={node.directory / 'log4j2.yaml'}",
            # The JDK's jmxremote flags would also listen on every address: see the agent.
            f"-javaagent:{jmx_agent_jar()}={node.jmx_port}",
            "-Djava.rmi.server.hostname=127.0.0.1",
            *self.jvm_options,
        ]
        with open(node.directory / "stdout.log", "ab") as out:
            node.process = subprocess.Popen(
                self.install.java_args(
                    "kafka.Kafka", str(node.directory / "server.properties"), jvm=jvm
                ),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )

    def wait_started(self, node_id: int, timeout: float = 120.0) -> None:
        """Until the node logs that it started and its client port accepts connections."""
        node = self._node(node_id)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node.process is not None and node.process.poll() is not None:
                raise RuntimeError(
                    f"Kafka node {node_id} exited with {node.process.returncode}: "
                    f"{self.log_text(node_id)[-3000:]}"
                )
            # KRaft: "Kafka Server started"; ZooKeeper mode: "[KafkaServer id=N] started".
            text = self.log_text(node_id)
            zookeeper_mode = f"[KafkaServer id={node_id}] started"
            started = "Kafka Server started" in text or zookeeper_mode in text
            if started and _accepts(node.port):
                return
            time.sleep(0.2)
        raise TimeoutError(f"Kafka node {node_id} did not start in {timeout} s")

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Signal one node's whole process group, and wait for it when the signal ends it."""
        node = self._node(node_id)
        if node.process is None or node.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.process.pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            try:
                node.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGKILL)
                node.process.wait(timeout=10)

    def restart(self, node_id: int, timeout: float = 120.0) -> None:
        """Start a stopped node again on the same ports and data."""
        node = self._node(node_id)
        if node.process is not None and node.process.poll() is None:
            raise RuntimeError(f"node {node_id} is running")
        self._launch(node)
        self.wait_started(node_id, timeout)

    def is_running(self, node_id: int) -> bool:
        process = self._node(node_id).process
        return process is not None and process.poll() is None

    def pid(self, node_id: int = 1) -> int | None:
        """The node's JVM process id (java is exec'd directly), None when not running: for
        reading its CPU from /proc (benchmarks/bench_producer_states_real.py)."""
        process = self._node(node_id).process
        return process.pid if process is not None and process.poll() is None else None

    def stop(self) -> None:
        """SIGTERM every node (a clean shutdown), SIGKILL what is left after 20 s."""
        for node in self._nodes:
            if node.process is not None and node.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for node in self._nodes:
            if node.process is None:
                continue
            try:
                node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGKILL)
                node.process.wait(timeout=10)
        self._stop_zookeeper()

    def _stop_zookeeper(self) -> None:
        process = self._zookeeper_process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def __enter__(self) -> RealKafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- topics --------------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication: int = 1,
        configs: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> str:
        """CreateTopics, then wait until every partition has a leader that answers: one named
        in Metadata may not lead yet (a Produce right after got NOT_LEADER_OR_FOLLOWER on a
        loaded machine), so kafka-python's end_offsets retries ListOffsets until each answers
        at its leader."""
        from kafka import KafkaConsumer
        from kafka.admin import KafkaAdminClient, NewTopic
        from kafka.errors import NodeNotReadyError, TopicAlreadyExistsError, UnknownBrokerIdError
        from kafka.structs import TopicPartition

        deadline = time.monotonic() + timeout
        while True:
            # Right after a start, the controller a client learns of may not be in the broker
            # list it got yet (kafka-python: UnknownBrokerIdError): asked again, anew.
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=30000)
            try:
                admin.create_topics(
                    [NewTopic(name, partitions, replication, topic_configs=dict(configs or {}))]
                )
                break
            except TopicAlreadyExistsError:
                break  # an earlier attempt's request was carried out
            except (UnknownBrokerIdError, NodeNotReadyError):
                admin.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        try:
            while time.monotonic() < deadline:
                parts = admin.describe_topics([name])[0].get("partitions") or []
                if len(parts) == partitions and all(p.get("leader_id", -1) >= 0 for p in parts):
                    break
                time.sleep(0.1)
            else:
                raise TimeoutError(f"topic {name} has no leader for every partition")
        finally:
            admin.close()
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, request_timeout_ms=30000)
        try:
            wanted = [TopicPartition(name, p) for p in range(partitions)]
            if set(consumer.end_offsets(wanted)) != set(wanted):
                raise TimeoutError(f"topic {name}: not every partition answers at its leader")
        finally:
            consumer.close()
        return name

    # -- Kafka's own tools ---------------------------------------------------------------
    def tool(
        self, main_class: str, *args: str, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        return self.install.run_tool(main_class, *args, timeout=timeout, workdir=self.workdir)

    def jmx_values(self, *object_names: str, node_id: int = 1) -> dict[str, float]:
        """The `Value` attribute of every MBean matching any of `object_names` (patterns may
        use *), read in one run of Kafka's JmxTool (a JVM start): {object name: value}."""
        names = [arg for name in object_names for arg in ("--object-name", name)]
        result = self.tool(
            # org.apache.kafka.tools from 3.5, the Scala kafka.tools before.
            self.install.tool_class("org.apache.kafka.tools.JmxTool", "kafka.tools.JmxTool"),
            "--jmx-url",
            self.jmx_url(node_id),
            *names,
            "--attributes",
            "Value",
            "--one-time",
            "true",
            "--report-format",
            "csv",
            "--date-format",
            "yyyy",
            timeout=60,
        )
        if result.returncode != 0:
            raise RuntimeError(f"JmxTool failed: {(result.stdout + result.stderr)[-2000:]}")
        return _parse_jmx_csv(result.stdout)


def _parse_jmx_csv(text: str) -> dict[str, float]:
    """JmxTool's one-time csv report: a `time,...` line, then one `object name:attribute,"value"`
    line per attribute (object names hold commas: the value is after the last one); values that
    are not numbers are left out."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        key, comma, value = line.rpartition(",")
        if not comma or key == "time" or ":" not in key:
            continue
        name = key.rpartition(":")[0]
        with contextlib.suppress(ValueError):
            values[name] = float(value.strip().strip('"'))
    return values


def _accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _kraft_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as random-uuid).
    Never one starting with "-" (1 in 64), which the tools' parser takes for an option; Kafka's
    own `Uuid.randomUuid` redraws those for the same reason."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def start_cluster(
    version: str,
    workdir: Path,
    *,
    nodes: int = 1,
    broker_config: Mapping[str, str] | None = None,
    listeners: Sequence[Listener] = (),
    jvm_options: Sequence[str] = (),
    zookeeper: bool = False,
) -> RealKafkaCluster:
    """Install check, then start: the one call tests and the demo make."""
    cluster = RealKafkaCluster(
        install=KafkaInstall.find(version),
        workdir=workdir,
        nodes=nodes,
        broker_config=dict(broker_config or {}),
        listeners=listeners,
        jvm_options=jvm_options,
        zookeeper=zookeeper,
    )
    try:
        return cluster.start()
    except BaseException:
        cluster.stop()
        raise
