"""``LocalPipeline``: an application's synthesized stack, running on the local runtime, driven by a test.

It is what a test of the application needs and no more: emit through the application's own catalog,
drain the pipeline, inject the failures that matter (a crash after the claim, before the completion, a
handler that fails), and read what the inbox recorded. Everything else stays reachable through
``.runtime`` (the ``outbox.local`` runtime: clients, functions, pipes, the virtual clock).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from outbox.catalog import Catalog
from outbox.inbox import ClaimRecord, DeadLetter, Inbox
from outbox.local import deadline, faults, setup
from outbox.local.runtime import LocalRuntime
from outbox.local.template import load_manifest_stacks
from outbox.log.envelope import Envelope
from outbox.log.store import EventStore
from outbox.ops import Operations, Topology
from outbox.outputs import application_environment
from outbox.settings import ConsumerSettings
from outbox.workflows.handoffs import Handoffs

__all__ = ["InvocationFailedError", "LocalPipeline", "PipelineSetupError", "WorkerCrash"]

WorkerCrash = faults.WorkerCrash
PipelineSetupError = setup.PipelineSetupError


class LocalPipeline:
    """One stack of a cloud assembly on the local runtime: ``with LocalPipeline.boot(assembly) as pipeline``."""

    def __init__(self, runtime: LocalRuntime) -> None:
        self.runtime = runtime
        self.topology = Topology.from_outputs(runtime.outputs())
        self._catalog: Catalog | None = None
        self._store: EventStore | None = None

    @classmethod
    @contextmanager
    def boot(
        cls,
        assembly_dir: Path | str,
        stack_name: str | None = None,
        *,
        environment: Mapping[str, str] | None = None,
        **options: Any,
    ) -> Iterator[LocalPipeline]:
        """Start the stack ``stack_name`` of ``assembly_dir`` (a ``cdk synth`` output folder; the only stack
        there when not named). ``environment`` is added to every function's; ``options`` go to
        ``LocalRuntime`` (``clock``, ``function_log_level``, ...)."""
        name = stack_name or _only_stack(Path(assembly_dir))
        with LocalRuntime.from_assembly(assembly_dir, name, environment=environment, **options) as runtime:
            pipeline = cls(runtime)
            pipeline.check_setup()
            yield pipeline

    def check_setup(self) -> None:
        """Fail now, with the cause, what would fail every test far from it: a catalog that cannot be built or
        breaks its contract (but for the problems the stack accepted, ``accept_catalog_problems``), and a
        durable consumer that cannot start (``PipelineSetupError``)."""
        self._catalog = setup.check_setup(self.runtime)

    # -- the application's side ---------------------------------------------------------------------

    @property
    def catalog(self) -> Catalog:
        """The application's catalog, built by the reference the durable consumer loads (``SUBSCRIPTIONS``),
        in that function's environment: the same event types, subscriptions and table names."""
        if self._catalog is None:
            self._catalog = setup.load_app_catalog(self.runtime)
        return self._catalog

    @property
    def environment(self) -> dict[str, str]:
        """The application's own function environment (``OutboxPipeline(environment=...)``), with the local
        names of what it references: ``pipeline.environment["ORDERS_TABLE"]``."""
        return application_environment(self.runtime.outputs())

    @property
    def store(self) -> EventStore:
        """An ``EventStore`` on the local events table with the application's catalog."""
        if self._store is None:
            self._store = EventStore(
                self.topology.events_table, client=self.runtime.client("dynamodb"), catalog=self.catalog
            )
        return self._store

    def emit(self, event_type: str, payload: Mapping[str, Any], *, tenant: str, **options: Any) -> Envelope:
        """``EventStore.emit`` on the local events table (``options``: ``actor``, ``extra_writes``, ...)."""
        options.setdefault("actor", "test")
        return self.store.emit(event_type, payload, tenant=tenant, **options)

    def drain(self, max_steps: int = 10_000) -> int:
        """Run pipes and consumers until nothing moves (virtual time advances over waits); the steps taken.

        Raises ``InvocationFailedError`` when an invocation of a consumer failed as a whole for a cause of its
        own (not a crash a test injected, nor Lambda's deadline), with the first such error: the function's
        log (``function_log``) has the rest."""
        marks = {name: len(mapping.crashes) for name, mapping in self.runtime.mappings.items()}
        steps = self.runtime.run_until_idle(max_steps=max_steps)
        for name, mapping in self.runtime.mappings.items():
            own = [exc for exc in mapping.crashes[marks.get(name, 0) :] if not _expected_crash(exc)]
            if own:
                first = own[0]
                raise InvocationFailedError(
                    f"{mapping.function_name}: {len(own)} invocation(s) failed as a whole; the first raised "
                    f"{type(first).__name__}: {first}"
                ) from first
        return steps

    # -- failures to inject (context managers; each yields a count of the faults it injected) ---------

    def crash_after_claim(self, subscription: str | None = None, times: int = 1) -> AbstractContextManager[Any]:
        """The worker dies right after its claim committed, before the handler ran."""
        return faults.crash_after_claim(times, subscription)

    def crash_before_completion(self, subscription: str | None = None, times: int = 1) -> AbstractContextManager[Any]:
        """The worker dies after the handler's effect, before the completion committed: the worst moment."""
        return faults.crash_before_completion(times, subscription)

    def crash_after_completion(self, subscription: str | None = None, times: int = 1) -> AbstractContextManager[Any]:
        """The completion committed, and the worker dies before SQS hears of it: the message comes back."""
        return faults.crash_after_completion(times, subscription)

    def fail_handler(
        self,
        subscription: str,
        times: int = 1,
        error: Callable[[], BaseException] = lambda: ConnectionError("injected"),
    ) -> AbstractContextManager[Any]:
        """The subscription's handler raises ``error()`` on its next ``times`` runs."""
        return faults.fail_handler(subscription, times, error)

    # -- what the inbox recorded -------------------------------------------------------------------

    @property
    def inbox(self) -> Inbox:
        """The inbox as the durable consumer sees it (its table, attempts and retention)."""
        settings = ConsumerSettings.from_env(self.durable_consumer.env)
        return Inbox(
            settings.inbox_table_name,
            client=self.runtime.client("dynamodb"),
            max_attempts=settings.max_attempts,
            retention=settings.inbox_retention,
            clock=self.runtime.clock,
        )

    def claim(self, event: Envelope | str, subscription: str) -> ClaimRecord | None:
        """The claim of (event, subscription), or None when there is none."""
        event_id = event.id if isinstance(event, Envelope) else event
        return self.inbox.read_claim(event_id, subscription)

    def dead_letters(self, tenant: str) -> list[DeadLetter]:
        """The tenant's open dead letters."""
        return self.inbox.dead_letters(tenant)

    # -- the WORKFLOW lane's durable executions ---------------------------------------------------------

    def execution(self, event: Envelope | str, subscription: str) -> str:
        """The ARN of the durable execution a WORKFLOW pair is handed to, while it is (its claim HANDED)."""
        event_id = event.id if isinstance(event, Envelope) else event
        handoff = Handoffs(self.inbox).handoff(event_id, subscription)
        if handoff is None:
            raise LookupError(f"{subscription} of {event_id} is handed to no execution (drain() first, or it ended)")
        return handoff.execution_arn

    def complete_callback(
        self, event: Envelope | str, subscription: str, result: Any = None, *, name: str | None = None
    ) -> None:
        """Answer the callback the pair's execution waits on (waited for, up to 30 s) with ``result`` (as JSON), as
        the service it waits for would (``name``: the callback's, where the workflow names its callbacks);
        ``drain()`` then runs the rest of the workflow and settles the pair."""
        service = self._waiting_service()
        callback_id = service.wait_for_callback(self.execution(event, subscription), name=name)
        service.send_callback_success(callback_id, json.dumps(result).encode())

    def fail_callback(
        self, event: Envelope | str, subscription: str, error_type: str, message: str, *, name: str | None = None
    ) -> None:
        """Fail the callback the pair's execution waits on, as the service it waits for would
        (``SendDurableExecutionCallbackFailure``): the workflow's wait raises a ``CallbackError`` with ``message``;
        uncaught, the execution fails and ``drain()`` makes the pair dead, its letter naming the execution."""
        service = self._waiting_service()
        service.send_callback_failure(
            service.wait_for_callback(self.execution(event, subscription), name=name), error_type, message
        )

    def _waiting_service(self) -> Any:
        if self.runtime.workflows is None:
            raise LookupError("this stack has no WORKFLOW subscription: no execution waits on a callback")
        return self.runtime.workflows.service

    @property
    def operations(self) -> Operations:
        """The operator tools (status, verify, replay, redrive, reconcile) on this pipeline."""
        ops: Operations = self.runtime.operations(self.catalog)
        return ops

    @property
    def durable_consumer(self) -> Any:
        return setup.durable_consumer(self.runtime)

    def function_log(self, output_name: str = "DurableConsumerFunctionName") -> list[str]:
        """What a function printed (its JSON log lines and EMF metrics), oldest first."""
        return list(self.runtime.function(output_name).log.lines)


class InvocationFailedError(Exception):
    """A consumer's invocation failed as a whole, for a cause of the application's own."""


def _expected_crash(exc: BaseException) -> bool:
    """A crash a test injected (``crash_*``), or Lambda stopping an invocation at its deadline."""
    return isinstance(exc, faults.WorkerCrash | deadline.InvocationTimedOut)


def _only_stack(assembly_dir: Path) -> str:
    stacks = load_manifest_stacks(assembly_dir)
    if len(stacks) != 1:
        raise ValueError(
            f"{assembly_dir} holds {len(stacks)} stacks ({', '.join(stacks) or 'none'}): name the one to boot"
        )
    return stacks[0]
