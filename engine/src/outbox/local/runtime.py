"""LocalRuntime: boots the synthesized stack on moto and drives the pipeline with the virtual clock.

    with LocalRuntime.from_assembly("cdk.out") as runtime:
        store = runtime.event_store(unchecked=True)
        store.emit("order.created", {...}, tenant="acme", actor="me")
        runtime.run_until_idle()

Tables and queues are created from the template (names are the logical ids); pipes and event source
mappings are emulated (outbox.local.pipe, outbox.local.esm); functions run in-process with their template
environment. In-process (``mock_aws``) for tests, or a moto server on a loopback port for any boto3 client or
the AWS CLI of this machine while it runs (no web page: ``outbox.local.loopback``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from botocore.config import Config
from moto.pipes.models import pipes_backends

from outbox import clock as engine_clock
from outbox.local import aws_fixes, saving
from outbox.local.aws_fixes.ttl import sweep_expired_items
from outbox.local.clients import REGION, RUNTIME_AGENT, STANDARD_RETRIES, local_client
from outbox.local.clock import VirtualClock
from outbox.local.esm import SqsEventSourceMapping
from outbox.local.functions import LambdaHandler, LocalFunction
from outbox.local.pipe import PipeConfig, PipeEmulator
from outbox.local.resources import ACCOUNT, LocalResources, create_queues, create_tables
from outbox.local.state import SavedState
from outbox.local.template import FunctionSpec, Reference, StackSpec, TemplateError, load_stack
from outbox.local.workflows import LocalWorkflows, name_aliases
from outbox.outputs import StackOutput, application_environment

logger = logging.getLogger(__name__)

STOPPED = "STOPPED"  # a pipe's DesiredState after StopPipe

# What Lambda would set; X-Ray is off (there is no daemon). Function output goes to LocalFunction.log.
FUNCTION_BASE_ENV = {
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_ACCESS_KEY_ID": "local",
    "AWS_SECRET_ACCESS_KEY": "local",
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
    "POWERTOOLS_TRACE_DISABLED": "true",
}


class LocalRuntime:
    # moto's in-process backend is global to the process: two runtimes would share (and clobber) it.
    _in_process_active = False

    def __init__(
        self,
        stack: StackSpec,
        *,
        clock: VirtualClock | None = None,
        port: int | None = None,
        environment: Mapping[str, str] | None = None,
        environment_overrides: Mapping[str, Mapping[str, str]] | None = None,
        handler_overrides: Mapping[str, LambdaHandler] | None = None,
        function_log_level: str = "WARNING",
        saved: SavedState | None = None,
        about: Mapping[str, Any] | None = None,
    ) -> None:
        """``saved``: a state to start from (``outbox.local.state``), its clock the one to pass. ``about``: what
        the served endpoint says of itself at ``GET /_outbox`` besides the clock (the folder it serves, say)."""
        self.stack = stack
        self.clock = clock or VirtualClock()
        self.port = port
        self.endpoint_url = f"http://127.0.0.1:{port}" if port else None
        self._environment = dict(environment or {})
        self._environment_overrides = {k: dict(v) for k, v in (environment_overrides or {}).items()}
        self._handler_overrides = dict(handler_overrides or {})
        self._function_log_level = function_log_level
        self.resources = LocalResources()
        self.functions: dict[str, LocalFunction] = {}
        self.pipes: dict[str, PipeEmulator] = {}
        self.mappings: dict[str, SqsEventSourceMapping] = {}
        self._saved = saved
        self._about = dict(about or {})
        self.server: Any = None  # the served endpoint (LoopbackServer), while it serves
        self._exit = ExitStack()
        self._clients: dict[str, Any] = {}
        self.workflows: LocalWorkflows | None = None  # the WORKFLOW lane's durable functions

    @classmethod
    def from_assembly(cls, assembly_dir: Path | str, stack_name: str = "OutboxEngine", **options: Any) -> LocalRuntime:
        return cls(load_stack(assembly_dir, stack_name), **options)

    # -- lifecycle ----------------------------------------------------------------------------------

    def __enter__(self) -> LocalRuntime:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def start(self) -> None:
        try:
            self._exit.enter_context(self._backend())
            self._exit.callback(aws_fixes.install(self.clock))
            self._exit.enter_context(engine_clock.use(self.clock, self.clock.sleep))
            if self._saved is None:
                self._create_tables()
                self._create_queues()
            else:
                saving.restore(self, self._saved)
            # Pipe names first: functions' environments may reference them (the operator endpoint does).
            self.resources.pipe_names.update({logical_id: logical_id for logical_id in self.stack.pipes})
            name_aliases(self.stack, self.resources)  # the consumer's environment names the durable functions
            self._build_functions()
            self._build_pipes()
            self._build_mappings()
            self.workflows = LocalWorkflows.start(self.stack, self.functions, self._exit)
            if self._saved is not None:
                saving.resume(self, self._saved)
        except BaseException:
            self._exit.close()
            raise

    def stop(self) -> None:
        self._exit.close()

    @contextmanager
    def _backend(self) -> Iterator[None]:
        if self.port is None:
            from moto import mock_aws

            if LocalRuntime._in_process_active:
                raise RuntimeError(
                    "one in-process runtime at a time: moto's in-process backend is shared by the whole "
                    "process; stop the other one, or give this one a port= (server mode)"
                )
            LocalRuntime._in_process_active = True
            try:
                with mock_aws():
                    yield
            finally:
                LocalRuntime._in_process_active = False
            return
        from outbox.local.loopback import LoopbackServer

        # For this machine's SDK clients only: no CORS, no other origin, no Host but its own (DNS rebinding).
        server = LoopbackServer(self.port, about=self.about)
        server.start()
        self.server = server
        try:
            yield
        finally:
            self.server = None
            server.stop()

    def about(self) -> dict[str, Any]:
        """What the served endpoint answers at ``GET /_outbox``: the virtual clock, and ``about``."""
        return {"clock": self.clock().isoformat(), **self._about}

    # -- a state that outlives the process -----------------------------------------------------------

    # -- clients and lookups ------------------------------------------------------------------------

    def client(self, service: str) -> Any:
        """A boto3 client of this runtime's endpoint; one per service, reused (clients are thread-safe, and
        making one costs milliseconds, which a simulator booting hundreds of runtimes notices)."""
        client = self._clients.get(service)
        if client is None:
            client = self._clients[service] = local_client(
                service, self.endpoint_url, retries=STANDARD_RETRIES, config=Config(user_agent_extra=RUNTIME_AGENT)
            )
        return client

    def output(self, name: str) -> str:
        """A stack output's local value, e.g. ``output("EventsTableName")``; a literal output as it is."""
        if name in self.stack.outputs and Reference.parse(self.stack.outputs[name]["Value"]) is None:
            # A literal, or a join of literals and references (a JSON document with table names, say).
            value = self.resources.value(self.stack.outputs[name]["Value"])
            return self._as_run(value) if name == StackOutput.APPLICATION_ENVIRONMENT else value
        return self.resources.resolve(self.stack.output_reference(name))

    def _as_run(self, application_json: str) -> str:
        """The functions' application variables as this runtime runs them: where the runtime's environment
        sets one the template names (the fake services' URL, say), the runtime's value, as the functions see."""
        variables = application_environment({StackOutput.APPLICATION_ENVIRONMENT: application_json})
        variables.update({name: self._environment[name] for name in variables if name in self._environment})
        return json.dumps(variables, sort_keys=True)

    def outputs(self) -> dict[str, str]:
        """Every output the runtime can resolve (those naming tables, queues, functions and pipes)."""
        resolved = {}
        for name in self.stack.outputs:
            try:
                resolved[name] = self.output(name)
            except TemplateError:
                continue  # e.g. the alarm topic or the operator role: not emulated
        return resolved

    def function(self, output_name: str) -> LocalFunction:
        """The function a stack output names, e.g. ``function("DurableConsumerFunctionName")``."""
        return self.functions[self.output(output_name)]

    def mapping(self, output_name: str) -> SqsEventSourceMapping:
        """The SQS event source mapping of the function a stack output names, e.g.
        ``mapping("DurableConsumerFunctionName")``."""
        name = self.output(output_name)
        (found,) = [m for m in self.mappings.values() if m.function_name == name]
        return found

    def pipe(self, output_name: str) -> PipeEmulator:
        """The pipe a stack output names, e.g. ``pipe("RelayPipeName")``; set ``.faults`` to inject faults."""
        return self.pipes[self.stack.output_reference(output_name).logical_id]

    def operations(self, catalog: Any, sqs: Any | None = None) -> Any:
        """The operator tools (``outbox.ops.Operations``) wired to this runtime."""
        from outbox.ops import Operations, Topology

        return Operations(
            Topology.from_outputs(self.outputs()),
            dynamodb=self.client("dynamodb"),
            sqs=sqs or self.client("sqs"),
            pipes=self.client("pipes"),
            catalog=catalog,
            clock=self.clock,
        )

    def event_store(self, **options: Any) -> Any:
        from outbox import EventStore

        return EventStore(self.output("EventsTableName"), client=self.client("dynamodb"), **options)

    # -- creating what the template declares --------------------------------------------------------

    def _create_tables(self) -> None:
        create_tables(self.client("dynamodb"), self.stack, self.resources)

    def _create_queues(self) -> None:
        create_queues(self.client("sqs"), self.stack, self.resources)

    def _build_functions(self) -> None:
        for spec in self.stack.functions.values():
            if (function := self.build_function(spec)) is not None:
                self.resources.function_names[spec.logical_id] = spec.logical_id
                self.functions[spec.logical_id] = function
                self._exit.callback(function.new_container)  # a stopped runtime keeps no module alive

    def build_function(self, spec: FunctionSpec) -> LocalFunction | None:
        """A container of the function ``spec`` declares, in its environment here (None: CDK's own helpers)."""
        if spec.handler.startswith("index.") and spec.asset_path is None:
            return None  # CDK's own inline helper functions (custom resources), not application code
        env = {name: self.resources.value(raw) for name, raw in spec.environment.items()}
        env.update(FUNCTION_BASE_ENV)
        env["AWS_LAMBDA_FUNCTION_NAME"] = spec.logical_id
        env["POWERTOOLS_LOG_LEVEL"] = self._function_log_level
        if self.endpoint_url:
            env["AWS_ENDPOINT_URL"] = self.endpoint_url
        env.update(self._environment)
        env.update(self._environment_overrides.get(spec.logical_id, {}))
        return LocalFunction(
            name=spec.logical_id,
            handler_path=spec.handler,
            code_root=self._code_root(spec.asset_path),
            timeout=timedelta(seconds=spec.timeout_seconds),
            env=env,
            clock=self.clock,
            override=self._handler_overrides.get(spec.logical_id),
        )

    def _code_root(self, asset_path: str | None) -> Path:
        # The staged asset is the code `cdk deploy` would upload; without one (an assembly synthesized
        # with asset staging off), the directory the app was synthesized from, which holds that code.
        if asset_path:
            staged = self.stack.assembly_dir / asset_path
            if staged.is_dir():
                return staged
        return self.stack.assembly_dir.parent

    def _build_pipes(self) -> None:
        streams, sqs = self.client("dynamodbstreams"), self.client("sqs")
        for spec in self.stack.pipes.values():
            config = PipeConfig(
                name=spec.logical_id,
                stream_arn=self.resources.stream_arns[spec.source_table],
                target_queue_url=self.resources.queue_urls[spec.target_queue],
                filter_patterns=spec.filter_patterns,
                input_template=spec.input_template,
                message_group_id=spec.message_group_id,
                message_deduplication_id=spec.message_deduplication_id,
                batch_size=spec.batch_size,
                maximum_retry_attempts=spec.maximum_retry_attempts,
                maximum_record_age_seconds=spec.maximum_record_age_seconds,
                starting_position=spec.starting_position,
                automatic_bisect=spec.automatic_bisect,
                dead_letter_queue_url=(
                    self.resources.queue_urls[spec.dead_letter_queue] if spec.dead_letter_queue else None
                ),
            )
            self.pipes[spec.logical_id] = PipeEmulator(config, streams, sqs, self.clock)
            self._register_pipe(spec.logical_id, config.stream_arn, self.resources.queue_arns[spec.target_queue])

    def _register_pipe(self, name: str, source: str, target: str) -> None:
        """moto's Pipes API keeps only state; registering the pipe lets DescribePipe answer as in AWS (a
        restored state has it, stopped or running)."""
        if self._saved is not None:
            return
        self.client("pipes").create_pipe(
            Name=name,
            Source=source,
            Target=target,
            RoleArn=f"arn:aws:iam::{ACCOUNT}:role/{name}",
            DesiredState="RUNNING",
        )

    def _build_mappings(self) -> None:
        sqs = self.client("sqs")
        for spec in self.stack.event_source_mappings.values():
            queue = self.stack.queues[spec.queue]
            function = self.functions[spec.function]
            self.mappings[spec.logical_id] = SqsEventSourceMapping(
                sqs=sqs,
                queue_url=self.resources.queue_urls[spec.queue],
                queue_arn=self.resources.queue_arns[spec.queue],
                # The function's own invoke, with the mapping's context: one invocation, one deadline, which a
                # fault that moves it (``deadline.extend``) moves for the mapping's judgement too.
                handler=function.invoke,
                function_name=function.name,
                function_timeout=function.timeout,
                visibility_timeout=timedelta(seconds=queue.visibility_timeout),
                clock=self.clock,
                batch_size=spec.batch_size,
                region=REGION,
            )

    # -- DynamoDB Time to Live ------------------------------------------------------------------------

    def sweep_expired_items(self) -> dict[str, int]:
        """Run DynamoDB's TTL sweep now, on the virtual clock: delete every item whose TTL attribute is a
        Number at or before ``self.clock()`` (epoch seconds), in every table of the stack whose TTL is
        enabled (by the template's TimeToLiveSpecification, or by a later UpdateTimeToLive: moto's state).

        AWS deletes expired items at an unspecified time after expiry, typically within a few days; the
        runtime deletes them only when asked, so a test decides when the sweep runs, and reads before the
        sweep still see expired items, as on AWS. An item without the attribute, or with a value that is
        not a Number, is never deleted. On a table with a stream each deletion writes a REMOVE record whose
        ``userIdentity`` is ``{"Type": "Service", "PrincipalId": "dynamodb.amazonaws.com"}``
        (``outbox.local.aws_fixes.ttl``, rule 11).

        Returns the number of items deleted by table name (the table's logical id), for every table with
        TTL enabled; 0 when none had expired.
        """
        dynamodb = self.client("dynamodb")
        arns = [
            dynamodb.describe_table(TableName=name)["Table"]["TableArn"] for name in self.resources.table_names.values()
        ]
        return sweep_expired_items(arns, self.clock())

    # -- driving the pipeline -----------------------------------------------------------------------

    def running_pipes(self) -> list[PipeEmulator]:
        """The pipes that read their stream: not those StopPipe stopped (moto keeps each pipe's desired state)
        until StartPipe, which resumes each from its checkpoint, as in AWS (a stopped pipe reads nothing)."""
        registered = pipes_backends[ACCOUNT][REGION].pipes
        return [
            pipe
            for name, pipe in self.pipes.items()
            if name not in registered or registered[name].desired_state != STOPPED
        ]

    def step(self) -> bool:
        """One round: every running pipe polls once, every event source mapping polls once. True if work was
        done."""
        progressed = False
        for pipe in self.running_pipes():
            progressed = pipe.poll() is not None or progressed
        for mapping in self.mappings.values():
            progressed = mapping.poll() is not None or progressed
        if self.workflows is not None:  # the settle pass, as its schedule runs it
            progressed = self.workflows.settle() or progressed
        return progressed

    def run_until_idle(self, max_steps: int = 10_000, on_step: Callable[[int], None] | None = None) -> int:
        """Step until nothing is left to do, letting virtual time pass while messages wait out their visibility
        timeout, and the workflows that await no callback end. Returns the number of steps."""
        for step in range(1, max_steps + 1):
            if on_step is not None:
                on_step(step)
            if self.step():
                continue
            waiting = [entry.visible_at for m in self.mappings.values() for entry in m.in_flight]
            waiting += [p.next_retry_at for p in self.running_pipes() if p.next_retry_at is not None]
            if not waiting and not (self.workflows and self.workflows.wait_for_running()):  # one ended: settle it
                return step
            self.clock.advance(max(timedelta(0), min(waiting, default=self.clock()) - self.clock()))
        raise RuntimeError(f"the pipeline did not settle in {max_steps} steps")
