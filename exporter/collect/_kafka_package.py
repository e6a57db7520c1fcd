"""kafka-python's packages, registered without running their `__init__` until a name they
define is read.

`kafka/__init__.py` imports kafka-python's admin client, consumer and producer, and through
them its network stack and the schema of every API; `kafka.protocol.admin` and
`kafka.protocol.consumer` import every admin and consumer API. That was most of what a
`scan` process spent starting (benchmarks/RESULTS.md), for classes the exporter never uses:
it imports submodules (`kafka.errors`, `kafka.protocol.admin.transactions`, `kafka.record`,
...), which need their package's `__path__`, not its `__init__`. So each package module is
made from its spec with its `__init__` not yet run; the first read of a name it defines
(`kafka.KafkaAdminClient`, `kafka.__version__`, `from kafka import ...`) runs it, so other
code in the same process sees the whole package as usual. A package imported already is left
as it is.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from typing import Any

PACKAGES = ("kafka", "kafka.protocol.admin", "kafka.protocol.consumer")
"""kafka-python's package, and its two protocol packages whose `__init__` loads (and parses
the JSON schema of) every admin or consumer API where the exporter uses a few."""


def register_lazy_packages() -> None:
    """Register PACKAGES with their `__init__` deferred (each a no-op when already imported)."""
    for name in PACKAGES:
        _register(name)


def _register(name: str) -> None:
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)  # imports the parent packages
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return  # not installed as a package: the ordinary import reports it
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader
    lock = threading.RLock()
    ran: list[bool] = []

    def __getattr__(attr: str) -> Any:  # PEP 562: a module-level __getattr__
        with lock:
            if not ran:
                ran.append(True)
                loader.exec_module(module)
        try:
            return module.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}") from None

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    if sys.modules.setdefault(name, module) is module and "." in name:
        parent, _, child = name.rpartition(".")
        setattr(sys.modules[parent], child, module)  # as an import binds a submodule
