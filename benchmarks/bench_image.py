"""Container image: build time and size (buildah, the local bookworm base).

Each repeat starts from an empty buildah storage (vfs) in a scratch directory, so nothing is
cached but the base's root filesystem tarball (scripts/image-base's cache):

- `base_import`: scripts/image-base loads the cached base into the empty storage.
- `venv_only` (baseline): a one-stage Dockerfile `FROM base` + `RUN python -m venv /opt/venv`,
  built the same way: the fixed cost of buildah, vfs copies and the venv itself.
- `image`: scripts/build-image, i.e. the repository's Dockerfile (two stages, `pip install`).

Sizes: the gzip layers as a registry stores them (`buildah push` to an OCI layout, summed from
its manifest) and `du` of a container's root filesystem, for the image and its base; and `du`
of /opt/venv in the image.
Prints a table and `RESULT {json}` lines. Needs root (or sudo), buildah and debootstrap
(scripts/install-image-deps). Network: the package indexes pip is configured with, and the
Debian mirror when the base is not cached yet.

    python benchmarks/bench_image.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO_ROOT, emit, machine_info

SUDO = [] if os.geteuid() == 0 else ["sudo"]
TAG = "localhost/kafka-txn-exporter:bench"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kafka-txn-exporter"


def _store(root: Path) -> list[str]:
    return ["--storage-driver", "vfs", "--root", str(root / "storage"),
            "--runroot", str(root / "run")]


def _timed(argv: list[str]) -> tuple[float, str]:
    began = time.monotonic()
    run = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    seconds = time.monotonic() - began
    if run.returncode != 0:
        sys.exit(f"bench_image: {' '.join(argv[:4])} ... failed:\n{run.stderr[-3000:]}")
    return seconds, run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""


def _gzip_layer_bytes(store: list[str], image: str, scratch: Path) -> int:
    """Sum of the image's gzip layer sizes (what a registry stores and a pull downloads),
    from the manifest of an OCI layout written by `buildah push`."""
    layout = scratch / "oci-gz"
    subprocess.run([*SUDO, "rm", "-rf", str(layout)], check=True, timeout=120)
    subprocess.run([*SUDO, "buildah", *store, "push", "--quiet", "--compression-format", "gzip",
                    image, f"oci:{layout}:x"], check=True, timeout=600, capture_output=True)
    index = json.loads((layout / "index.json").read_text())
    digest = index["manifests"][0]["digest"].split(":", 1)[1]
    manifest = json.loads((layout / "blobs" / "sha256" / digest).read_text())
    assert all(layer["mediaType"].endswith("+gzip") for layer in manifest["layers"]), manifest
    return sum(int(layer["size"]) for layer in manifest["layers"])


def _disk_kib(store: list[str], image: str) -> tuple[int, int]:
    """(whole root filesystem, /opt/venv) of a container of `image`, in KiB (du)."""
    ctr = subprocess.run([*SUDO, "buildah", *store, "from", "--quiet", "--pull=never", image],
                         capture_output=True, text=True, check=True, timeout=600).stdout.strip()
    try:
        mount = subprocess.run([*SUDO, "buildah", *store, "mount", ctr], capture_output=True,
                               text=True, check=True, timeout=60).stdout.strip()
        sizes = []
        for path in (mount, f"{mount}/opt/venv"):
            du = subprocess.run([*SUDO, "du", "-sk", "-x", path], capture_output=True,
                                text=True, timeout=60, check=False).stdout
            sizes.append(int(du.split()[0]) if du.strip() else 0)
        return sizes[0], sizes[1]
    finally:
        subprocess.run([*SUDO, "buildah", *store, "rm", ctr], capture_output=True, timeout=120,
                       check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    machine = machine_info()
    base_cached = any(CACHE.glob("base-*.tar"))
    rows: dict[str, list[float]] = {"base_import": [], "venv_only": [], "image": []}
    sizes: dict[str, Any] = {}
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="kte-bench-image-") as tmp:
            scratch = Path(tmp)
            store = _store(scratch / "buildah")
            try:
                seconds, base = _timed([str(REPO_ROOT / "scripts" / "image-base"), *store])
                rows["base_import"].append(seconds)
                dockerfile = scratch / "Dockerfile.venv-only"
                dockerfile.write_text("ARG PYTHON_IMAGE\nFROM ${PYTHON_IMAGE}\n"
                                      "RUN python -m venv /opt/venv\n")
                seconds, _ = _timed([*SUDO, "buildah", *store, "bud", "--isolation", "chroot",
                                     "--format", "docker", "--pull=never", "--quiet",
                                     "--build-arg", f"PYTHON_IMAGE={base}",
                                     "--file", str(dockerfile), "--tag", "venv-only",
                                     str(scratch)])
                rows["venv_only"].append(seconds)
                seconds, _ = _timed([sys.executable, str(REPO_ROOT / "scripts" / "build-image"),
                                     "--tag", TAG, *store[2:]])
                rows["image"].append(seconds)
                if i == 0:
                    image_kib, venv_kib = _disk_kib(store, TAG)
                    base_kib, _ = _disk_kib(store, base)
                    sizes = {
                        "image_gzip_bytes": _gzip_layer_bytes(store, TAG, scratch),
                        "base_gzip_bytes": _gzip_layer_bytes(store, base, scratch),
                        "image_disk_kib": image_kib,
                        "base_disk_kib": base_kib,
                        "venv_kib": venv_kib,
                    }
            finally:
                subprocess.run([*SUDO, "rm", "-rf", str(scratch / "buildah")], timeout=600,
                               check=False)
        print(f"repeat {i + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in rows.items()),
              file=sys.stderr, flush=True)

    medians = {k: statistics.median(v) for k, v in rows.items()}
    mib = 1024 * 1024
    print(f"{'step':<14}{'median s':>10}  runs")
    for k, v in rows.items():
        print(f"{k:<14}{medians[k]:>10.1f}  {' / '.join(f'{x:.1f}' for x in v)}")
    print(f"image / venv_only build time: {medians['image'] / medians['venv_only']:.2f}")
    print(f"image: {sizes['image_gzip_bytes'] / mib:.1f} MiB gzip layers, "
          f"{sizes['image_disk_kib'] / 1024:.1f} MiB on disk; base: "
          f"{sizes['base_gzip_bytes'] / mib:.1f} MiB gzip layers, "
          f"{sizes['base_disk_kib'] / 1024:.1f} MiB on disk; "
          f"/opt/venv {sizes['venv_kib'] / 1024:.1f} MiB on disk; image / base (gzip) "
          f"{sizes['image_gzip_bytes'] / sizes['base_gzip_bytes']:.2f}")
    emit({
        "bench": "image", "machine": machine, "repeat": args.repeat,
        "base_tarball_cached_at_start": base_cached,
        "seconds": {k: [round(x, 2) for x in v] for k, v in rows.items()},
        "median_seconds": {k: round(v, 2) for k, v in medians.items()},
        "build_ratio_image_over_venv_only": round(medians["image"] / medians["venv_only"], 2),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        **sizes,
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
