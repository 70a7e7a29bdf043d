"""``outbox`` imports its public names on first use: importing the package, or a handler module inside it,
does not import the whole engine first. Checked in fresh interpreters, since this process has long imported
everything."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import outbox


def fresh(code: str) -> str:
    env = {**os.environ, "POWERTOOLS_SERVICE_NAME": "test", "AWS_DEFAULT_REGION": "us-east-1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_the_package_imports_no_engine_module() -> None:
    loaded = fresh("import sys, outbox; print(sorted(m for m in sys.modules if m.startswith('outbox.')))")
    assert loaded == "[]"


def test_a_name_is_imported_with_its_module_on_first_use() -> None:
    assert fresh("from outbox import EventStore; print(EventStore.__module__)") == "outbox.store"
    assert fresh("import outbox; print(outbox.writes.__name__)") == "outbox.writes"


def test_the_durable_consumer_s_handler_keeps_powertools_parser_models_out() -> None:
    # Powertools' batch utility imports them when pydantic is already loaded; the handler imports it first.
    code = "import sys, outbox.handlers.durable_consumer; print(any('utilities.parser' in m for m in sys.modules))"
    assert fresh(code) == "False"


def test_the_durable_consumer_s_handler_leaves_what_it_may_never_need_to_first_use() -> None:
    # Its cold start imports the store and the catalog, not what only a new event's id (ulid), a float's
    # canonical form (rfc8785) or the record-change lane needs.
    deferred = ("ulid", "rfc8785", "outbox.record_changes")
    code = f"import sys, outbox.handlers.durable_consumer; print([m for m in {deferred!r} if m in sys.modules])"
    assert fresh(code) == "[]"


def test_an_unknown_name_is_an_attribute_error_and_every_public_name_resolves() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        outbox.Nope  # noqa: B018
    assert all(getattr(outbox, name) is not None for name in outbox.__all__)
    assert set(outbox.__all__) <= set(dir(outbox))
