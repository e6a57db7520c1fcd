"""Response frames are capped: a broker, or anyone in the middle, announcing
a 500 MiB frame fails that connection as soon as the 4-byte length is read, and the process's
memory does not grow (it used to buffer and copy the whole frame: RSS from 44 MB to 1.1-1.6 GB).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from exporter.config import load_settings
from exporter.errors import ConfigError
from exporter.settings import DEFAULT_MAX_RESPONSE_BYTES

MIB = 1024 * 1024
REPO = Path(__file__).resolve().parents[2]

# A fresh interpreter, so its peak RSS (VmHWM) belongs to this scenario alone. The fake broker
# answers the first request (ApiVersions) with a frame that announces 500 MiB and then sends
# the bytes for real, 1 MiB at a time, until the client hangs up.
_SCENARIO = textwrap.dedent(
    """
    import asyncio, json, struct, sys
    from exporter.collect.connection import BrokerConnection, CollectError, ConnectionOptions

    FRAME = 500 * 1024 * 1024
    sent = [0]

    def status(field):
        for line in open("/proc/self/status"):
            if line.startswith(field):
                return int(line.split()[1]) // 1024
        raise KeyError(field)

    async def broker(reader, writer):
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        correlation = (await reader.readexactly(size))[4:8]
        writer.write(struct.pack(">i", FRAME) + correlation)
        chunk = bytes(1024 * 1024)
        try:
            while sent[0] < FRAME:
                writer.write(chunk)
                await writer.drain()
                sent[0] += len(chunk)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(broker, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        options = ConnectionOptions(client_id="t", max_response_bytes=int(sys.argv[1]))
        error = None
        try:
            await BrokerConnection("127.0.0.1", port, options).connect()
        except CollectError as exc:
            error = f"{exc.kind}: {exc}"
        server.close()
        return error

    before = status("VmRSS")
    error = asyncio.run(main())
    print(json.dumps({"error": error, "rss_before_mib": before,
                      "hwm_mib": status("VmHWM"), "sent_mib": sent[0] // (1024 * 1024)}))
    """
)


def run_scenario(max_response_bytes: int) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _SCENARIO, str(max_response_bytes)],
        capture_output=True, text=True, timeout=120, cwd=REPO, check=True,
    )
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_a_500_mib_frame_is_refused_before_anything_is_buffered() -> None:
    result = run_scenario(DEFAULT_MAX_RESPONSE_BYTES)
    error = str(result["error"])
    assert error.startswith("DECODE_ERROR: response frame of 524288000 bytes")
    assert f"exceeds max_response_bytes ({DEFAULT_MAX_RESPONSE_BYTES})" in error
    rss_before, hwm = int(str(result["rss_before_mib"])), int(str(result["hwm_mib"]))
    assert hwm - rss_before < 32, result  # not the 500 MiB frame, not a copy of it


def test_default_cap_is_well_below_512_mib_and_configurable_within_bounds(
    tmp_path: Path,
) -> None:
    assert DEFAULT_MAX_RESPONSE_BYTES == 100 * MIB
    config = tmp_path / "c.yaml"
    template = "clusters:\n  - name: a\n    bootstrap_servers: [k:9092]\n{extra}"
    config.write_text(template.format(extra=f"    max_response_bytes: {16 * MIB}\n"))
    assert load_settings(str(config), env={}).clusters[0].max_response_bytes == 16 * MIB
    assert load_settings(str(config), env={"KTE_CLUSTER_MAX_RESPONSE_BYTES": str(MIB)}
                         ).clusters[0].max_response_bytes == MIB
    for bad in (0, MIB - 1, 512 * MIB + 1, "lots"):
        config.write_text(template.format(extra=f"    max_response_bytes: {bad}\n"))
        with pytest.raises(ConfigError, match=r"clusters\[0\]\.max_response_bytes"):
            load_settings(str(config), env={})
