"""What the benchmarks measure against: the synthesized cloud assembly and the bundled engine layer.

``prepare()`` synthesizes the app once (as ``make demo`` does: in-process, layer bundling skipped, the
function code staged) into ``.local/bench/cdk.out``, and finds the bundled layer: the one ``make synth``
left in ``cdk.out/asset.*/python`` if it is current, else one bundled here, once, by the stack's own
bundler (pip for the Lambda platform) into ``.local/bench/layer/<digest>``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from benchmarks.machine import PROJECT_ROOT
from outbox_cdk import engine_layer

BENCH_DIR = PROJECT_ROOT / ".local" / "bench"
ASSEMBLY_DIR = BENCH_DIR / "cdk.out"
STACK_NAME = "OutboxEngine"
ENGINE_SOURCE = engine_layer.ENGINE_PACKAGE
LAYER_REQUIREMENTS = engine_layer.LAYER_REQUIREMENTS


@dataclass(frozen=True)
class Layer:
    path: Path  # the folder holding python/
    origin: str  # where it came from, for RESULTS.md


def synthesize(outdir: Path = ASSEMBLY_DIR) -> Path:
    from tools.demo import synthesize as synthesize_like_the_demo

    if outdir.exists():
        shutil.rmtree(outdir)
    outdir.parent.mkdir(parents=True, exist_ok=True)
    return synthesize_like_the_demo(outdir)


def pinned_distributions() -> set[str]:
    """``name==version`` of every pin in the layer's requirements, normalised like dist-info folders."""
    pins = set()
    for line in LAYER_REQUIREMENTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins.add(f"{_normalise(name)}=={version.strip()}")
    return pins


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def bundled_distributions(python_dir: Path) -> set[str]:
    found = set()
    for info in python_dir.glob("*.dist-info"):
        name, _, version = info.name.removesuffix(".dist-info").rpartition("-")
        found.add(f"{_normalise(name)}=={version}")
    return found


def _tree_digest(root: Path) -> str:
    return _files_digest(root, [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts])


def _engine_digest() -> str:
    """The digest of the engine's files as the layer carries them."""
    return _files_digest(ENGINE_SOURCE, engine_layer.engine_files())


def _files_digest(root: Path, files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: str(p.relative_to(root))):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def is_current(python_dir: Path) -> bool:
    """The bundle holds exactly the pinned dependencies and today's engine source."""
    engine = python_dir / "outbox"
    return (
        engine.is_dir()
        and bundled_distributions(python_dir) == pinned_distributions()
        and _tree_digest(engine) == _engine_digest()
    )


def bundled_layer() -> Layer:
    candidates = sorted(
        (p.parent for p in (PROJECT_ROOT / "cdk.out").glob("asset.*/python") if p.is_dir()),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for candidate in candidates:
        if is_current(candidate / "python"):
            return Layer(candidate, f"`make synth` (cdk.out/{candidate.name})")
    digest = hashlib.sha256((LAYER_REQUIREMENTS.read_text() + _engine_digest()).encode()).hexdigest()[:16]
    target = BENCH_DIR / "layer" / digest
    stale = f"; cdk.out/{candidates[0].name} is stale" if candidates else ""
    if not (target / "python").is_dir():
        from outbox_cdk.engine_layer import PipForLambdaBundling

        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        PipForLambdaBundling().try_bundle(str(target))
    return Layer(target, f"bundled by the benchmark with the stack's bundler (.local/bench/layer/{digest}){stale}")


def prepare() -> dict[str, str]:
    assembly = synthesize()
    layer = bundled_layer()
    return {"assembly": str(assembly), "layer": str(layer.path), "layer_origin": layer.origin}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.write_text(json.dumps(prepare(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
