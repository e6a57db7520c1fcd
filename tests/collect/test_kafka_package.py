"""kafka-python's packages are registered with their `__init__` deferred
(exporter/collect/_kafka_package.py): the exporter's imports skip kafka-python's clients, and
any code reading a name of theirs still gets the whole package."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version


def _run(code: str) -> object:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_collect_loads_none_of_kafka_pythons_clients() -> None:
    loaded = _run(
        "import json, sys\n"
        "import exporter.collect.poll\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('kafka'))))\n"
    )
    assert isinstance(loaded, list)
    assert "kafka.errors" in loaded and "kafka.protocol.admin.transactions" in loaded
    for client in ("kafka.admin", "kafka.consumer.group", "kafka.producer", "kafka.net",
                   "kafka.protocol.admin.acl", "kafka.protocol.consumer.group"):
        assert client not in loaded


def test_names_of_the_packages_still_resolve_after_the_exporter_loaded() -> None:
    answer = _run(
        "import json\n"
        "import exporter.collect.poll\n"
        "import kafka, kafka.protocol.admin, kafka.protocol.consumer\n"
        "from kafka import KafkaAdminClient, __version__\n"
        "from kafka.protocol.consumer import JoinGroupRequest\n"
        "try:\n"
        "    kafka.no_such_name\n"
        "    missing = 'no error'\n"
        "except AttributeError as exc:\n"
        "    missing = str(exc)\n"
        "print(json.dumps([__version__, KafkaAdminClient.__module__,\n"
        "                  kafka.protocol.admin.DescribeAclsRequest.__name__,\n"
        "                  JoinGroupRequest.__name__, missing]))\n"
    )
    assert answer == [version("kafka-python"), "kafka.admin.client", "DescribeAclsRequest",
                      "JoinGroupRequest", "module 'kafka' has no attribute 'no_such_name'"]


def test_a_kafka_imported_before_the_exporter_is_left_as_it_is() -> None:
    answer = _run(
        "import json, kafka\n"
        "import exporter.collect.poll, sys\n"
        "print(json.dumps([sys.modules['kafka'] is kafka, 'kafka.admin' in sys.modules]))\n"
    )
    assert answer == [True, True]
