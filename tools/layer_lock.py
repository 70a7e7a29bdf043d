"""Write the engine layer's hashed lock (``make layer-lock``): each pin of ``layers/engine/requirements.txt`` with
the sha256 of its wheel for Lambda's platform, downloaded with pip from the index (the network, once).

Run it after changing a pin; review the diff (a hash changed with no pin changed is a wheel replaced on the
index: find out why before committing it)."""

from __future__ import annotations

import hashlib
import re
import sys
import tempfile
from pathlib import Path

from outbox_cdk.engine_layer import LAYER_LOCK, LAYER_REQUIREMENTS, download_wheels

HEADER = """\
# The engine layer's lock: the pins of requirements.txt, each with the sha256 of its wheel for Lambda's platform
# (manylinux2014_aarch64, CPython 3.13). The layer's wheels are downloaded and installed from it with
# --require-hashes, so a wheel that differs, from the index or in the wheelhouse, is refused. Written by
# `make layer-lock` (tools/layer_lock.py); tests/unit/test_layer_requirements.py checks it against requirements.txt.
"""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(requirements: Path) -> list[str]:
    """The requirement lines, in order, without comments."""
    return [line.split("#")[0].strip() for line in requirements.read_text().splitlines() if line.split("#")[0].strip()]


def lock_text(requirements: Path, wheels: Path) -> str:
    """Each pin of ``requirements`` with the sha256 of its one wheel in ``wheels``."""
    digests = {
        canonical(wheel.name.split("-")[0]): hashlib.sha256(wheel.read_bytes()).hexdigest()
        for wheel in wheels.glob("*.whl")
    }
    lines = []
    for pin in pins(requirements):
        name = canonical(pin.split("==")[0])
        if name not in digests:
            raise SystemExit(f"no wheel of {pin} was downloaded: is it pinned with == and built for the platform?")
        lines.append(f"{pin} --hash=sha256:{digests[name]}")
    return HEADER + "\n".join(lines) + "\n"


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        download_wheels(LAYER_REQUIREMENTS, Path(directory), hashed=False)
        text = lock_text(LAYER_REQUIREMENTS, Path(directory))
    target = Path(__file__).resolve().parents[1] / "layers" / "engine" / LAYER_LOCK.name
    target.write_text(text)
    sys.stdout.write(f"wrote {target}\n")


if __name__ == "__main__":
    main()
