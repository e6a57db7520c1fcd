"""A Spark standalone cluster on loopback for the benchmarks: one master, one worker, both
separate JVMs started with the pip distribution's `spark-class` (as tests/spark does)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def standalone_cluster(cores: int, memory: str) -> Iterator[str]:
    """Yields the master URL once a worker with `cores` and `memory` has registered."""
    import pyspark

    spark_home = Path(pyspark.__file__).resolve().parent
    root = Path(tempfile.mkdtemp(prefix="bench-spark-standalone-"))
    port, ui, worker_ui = _free_port(), _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYSPARK_PYTHON"}}
    env.update(SPARK_HOME=str(spark_home), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_LOG_DIR=str(root), SPARK_WORKER_DIR=str(root / "work"))
    spark_class = str(spark_home / "bin" / "spark-class")
    url = f"spark://127.0.0.1:{port}"
    procs = [
        subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host",
                          "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
                         env=env, stdout=(root / "master.log").open("wb"),
                         stderr=subprocess.STDOUT, start_new_session=True),
        subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", "--host",
                          "127.0.0.1", "--cores", str(cores), "--memory", memory,
                          "--webui-port", str(worker_ui), url],
                         env=env, stdout=(root / "worker.log").open("wb"),
                         stderr=subprocess.STDOUT, start_new_session=True),
    ]
    try:
        deadline = time.monotonic() + 120
        while True:
            with (contextlib.suppress(OSError, ValueError),
                  urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as resp):
                if any(w.get("state") == "ALIVE" for w in json.load(resp)["workers"]):
                    break
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"standalone cluster did not start; logs in {root}")
            time.sleep(0.25)
        yield url
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
