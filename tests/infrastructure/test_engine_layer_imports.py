"""Every module of the engine layer imports with only what the layer carries.

The layer leaves out the local runtime (``outbox.local``) and the CLI: a module of the layer that imports either
works in every test here (the whole engine is installed) and fails in Lambda at cold start. The benchmark that
starts the durable consumer from the layer found one (``outbox.testing.services``, which the example's modules
import, imported the local runtime's deadline).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from outbox_cdk import engine_layer

# What a Lambda function never imports: the test tools that boot the local runtime ([local] extra).
TEST_TOOLS_ON_THE_LOCAL_RUNTIME = {"outbox.testing.pipeline"}


def test_every_module_of_the_layer_imports_without_the_local_runtime_or_the_cli(tmp_path: Path) -> None:
    root = engine_layer.ENGINE_PACKAGE
    modules = []
    for path in engine_layer.engine_files():
        relative = path.relative_to(root)
        target = tmp_path / "outbox" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        if path.suffix == ".py":
            parts = ("outbox", *relative.with_suffix("").parts)
            modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    assert "outbox.testing.services" in modules

    probe = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError as exc:\n"
        "        print(f'{name}: {exc}')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, *sorted(modules)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1"},
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    failed = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert set(failed) == TEST_TOOLS_ON_THE_LOCAL_RUNTIME, failed
