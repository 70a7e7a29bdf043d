"""The layer ships byte code compiled by Lambda's Python version, used without checking the sources."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from outbox_cdk import engine_layer

THIS_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


def fake_python(directory: Path, name: str, prints: str, exit_code: int = 0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\necho {prints}\nexit {exit_code}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_an_interpreter_named_explicitly_must_be_of_the_runtimes_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_layer, "RUNTIME_VERSION", THIS_VERSION)
    assert engine_layer.byte_code_compiler({engine_layer.LAYER_PYTHON_ENV: sys.executable}) == sys.executable
    monkeypatch.setattr(engine_layer, "RUNTIME_VERSION", "3.99")
    with pytest.raises(engine_layer.ByteCodeCompilerError, match=r"is Python \d+\.\d+; .* compiled by Python 3\.99"):
        engine_layer.byte_code_compiler({engine_layer.LAYER_PYTHON_ENV: sys.executable})
    with pytest.raises(engine_layer.ByteCodeCompilerError, match="is nothing that runs"):
        engine_layer.byte_code_compiler({engine_layer.LAYER_PYTHON_ENV: "/nonexistent/python"})


def test_the_runtimes_python_is_found_on_path_only_when_it_runs_and_is_that_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(engine_layer, "RUNTIME_VERSION", "3.99")
    good = fake_python(tmp_path / "good", "python3.99", "3.99")
    assert engine_layer.byte_code_compiler({"PATH": str(good.parent)}) == str(good)
    # A shim that exists but cannot run this version (pyenv's, outside the version it belongs to).
    shim = fake_python(tmp_path / "shim", "python3.99", "not-selected", exit_code=127)
    assert engine_layer.byte_code_compiler({"PATH": str(shim.parent)}) is None
    liar = fake_python(tmp_path / "liar", "python3.99", "3.12")
    assert engine_layer.byte_code_compiler({"PATH": str(liar.parent)}) is None
    assert engine_layer.byte_code_compiler({"PATH": str(tmp_path / "empty")}) is None


def test_compiled_modules_are_imported_from_their_byte_code_without_reading_the_source(tmp_path: Path) -> None:
    package = tmp_path / "python" / "shipped"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "value.py").write_text("ANSWER = 'compiled'\n")
    engine_layer.compile_byte_code(tmp_path / "python", sys.executable)
    tag = sys.implementation.cache_tag
    compiled = package / "__pycache__" / f"value.{tag}.pyc"
    flags = int.from_bytes(compiled.read_bytes()[4:8], "little")
    assert flags == 0b01, "hash-based and never checked against the source (PEP 552 unchecked-hash)"
    # The layer never changes under its byte code; a changed source proves the .pyc is what runs.
    (package / "value.py").write_text("ANSWER = 'from source'\n")
    printed = subprocess.run(
        [sys.executable, "-c", "import shipped.value; print(shipped.value.ANSWER)"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "python"), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert printed == "compiled"


def test_a_file_that_does_not_compile_fails_the_build_instead_of_shipping_without_byte_code(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("def (:\n")
    with pytest.raises(subprocess.CalledProcessError):
        engine_layer.compile_byte_code(tmp_path, sys.executable)


def test_the_layer_hash_says_whether_byte_code_is_in_it() -> None:
    assert engine_layer.layer_digest(None) != engine_layer.layer_digest("/usr/bin/python3.13")
    assert engine_layer.layer_digest("/usr/bin/python3.13") == engine_layer.layer_digest("/opt/python3.13")
