"""``outbox`` imports its public names on first use: importing the package, or a handler module inside it,
does not import the whole engine first. Checked in fresh interpreters, since this process has long imported
everything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
    assert fresh("from outbox import EventStore; print(EventStore.__module__)") == "outbox.log.store"
    assert fresh("import outbox; print(outbox.writes.__name__)") == "outbox.log.writes"


def test_the_durable_consumer_s_handler_keeps_powertools_parser_models_out() -> None:
    # Powertools' batch utility imports them when pydantic is already loaded; the handler imports it first.
    code = "import sys, outbox.handlers.durable_consumer; print(any('utilities.parser' in m for m in sys.modules))"
    assert fresh(code) == "False"


def test_the_durable_consumer_s_handler_leaves_what_it_may_never_need_to_first_use() -> None:
    # Its cold start imports the store and the catalog, not what only a new event's id (ulid), a float's
    # canonical form (rfc8785), the record-change lane, an ordered subscription (its gate and watermarks),
    # verifying a chain or an operator's view of the inbox needs.
    deferred = (
        "ulid",
        "rfc8785",
        "outbox.best_effort.changes",
        "outbox.pairs.order",
        "outbox.delivery.ordered",
        "outbox.log.verification",
        "outbox.inbox.records",
    )
    code = f"import sys, outbox.handlers.durable_consumer; print([m for m in {deferred!r} if m in sys.modules])"
    assert fresh(code) == "[]"


def test_a_consumer_builds_its_ordered_gate_only_for_a_catalog_that_orders() -> None:
    code = """
import sys
from outbox.delivery.consumer import DurableConsumer
from outbox.inbox import Inbox
from outbox.pairs.order import WakeUps
from outbox.log.store import EventStore
from outbox.subscriptions import Lane, Subscription, SubscriptionRegistry

def consumer(ordered):
    subscription = Subscription("app.sub", "app.thing", Lane.DURABLE, lambda delivery: None, ordered=ordered)
    wake_ups = WakeUps("queue", sqs=None, dynamodb=None, events_table="events") if ordered else None
    built = DurableConsumer(SubscriptionRegistry.of([subscription]), Inbox("inbox", client=None, max_attempts=3),
                            EventStore("events", client=None, unchecked=True), wake_ups=wake_ups)
    return "ordered" in vars(built)
print(consumer(False), consumer(True))
"""
    # Built with the consumer (no two threads can race to build it) only where a subscription is ordered.
    assert fresh(code) == "False True"


def test_the_inbox_s_operator_records_load_on_first_use() -> None:
    code = "import sys, outbox.inbox as i; before = 'outbox.inbox.records' in sys.modules; i.DeadLetter; print(before)"
    assert fresh(code) == "False"
    from outbox import inbox

    assert inbox.ClaimRecord.__module__ == "outbox.inbox.records"
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        inbox.Nope  # noqa: B018


def test_an_unknown_name_is_an_attribute_error_and_every_public_name_resolves() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        outbox.Nope  # noqa: B018
    assert all(getattr(outbox, name) is not None for name in outbox.__all__)
    assert set(outbox.__all__) <= set(dir(outbox))


@pytest.mark.parametrize("old", sorted(outbox._MOVED))
def test_a_module_that_moved_still_imports_by_its_old_name_with_a_warning(old: str) -> None:
    """The old names (``outbox.auditor`` before ``outbox.audit``, ``outbox.store`` before ``outbox.log``, ...) import
    the same module, saying where it went; the module keeps its own name and spec, so reloading it reloads it."""
    new = outbox._MOVED[old]
    code = (
        "import warnings, importlib, sys\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        f"    module = importlib.import_module({old!r})\n"
        f"assert module is sys.modules[{new!r}] is sys.modules[{old!r}]\n"
        "assert importlib.reload(module) is module\n"
        "said = [str(w.message) for w in caught if w.category is DeprecationWarning]\n"
        "print(module.__name__, module.__spec__.name, said)"
    )
    assert fresh(code) == f"{new} {new} ['{old} is {new} now (the old name goes in 0.9.0)']"


def test_the_old_names_from_import_what_they_did_and_share_the_module_s_state() -> None:
    """A user's ``from outbox.store import EventStore`` still works, and a test that patches a module by its old name
    patches the module the engine runs."""
    code = (
        "import warnings; warnings.simplefilter('ignore')\n"
        "from outbox.store import EventStore\n"
        "from outbox.consumer import DurableConsumer\n"
        "import outbox.ordering, outbox.pairs.order\n"
        "outbox.ordering.MARK = 1\n"
        "print(EventStore.__module__, DurableConsumer.__module__, outbox.pairs.order.MARK)"
    )
    assert fresh(code) == "outbox.log.store outbox.delivery.consumer 1"


def test_no_old_name_is_a_file_of_the_package() -> None:
    """The package root shows the architecture: a moved module leaves no file behind under its old name."""
    root = Path(outbox.__file__).parent
    for old, new in outbox._MOVED.items():
        assert not (root / f"{old.removeprefix('outbox.').replace('.', '/')}.py").exists(), old
        assert (root / f"{new.removeprefix('outbox.').replace('.', '/')}.py").exists(), new


def test_the_audit_package_keeps_the_names_of_the_module_it_was_and_loads_them_on_first_use() -> None:
    loaded = fresh("import sys, outbox.audit; print(sorted(m for m in sys.modules if m.startswith('outbox.')))")
    assert loaded == "['outbox.audit']"
    assert fresh("from outbox.audit import AuditLog; print(AuditLog.__module__)") == "outbox.audit.table"
    assert fresh("from outbox.audit import FindingKind; print(FindingKind.__module__)") == "outbox.audit.findings"
