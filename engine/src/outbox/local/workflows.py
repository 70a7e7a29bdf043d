"""The WORKFLOW lane on the local runtime: the template's durable functions run in the AWS Durable Execution Testing
SDK, behind the local Lambda durable API (``outbox.local.durable_functions``), and the settle pass runs each step.

From the template: every ``AWS::Lambda::Alias`` whose version is of a function with a ``DurableConfig`` is a durable
function the consumer starts (its ``Ref`` resolves to the alias's ARN, as in AWS); its handler, imported as Lambda
would import it (the function's code and environment), is registered with the service under that ARN, with the
configured execution timeout. Every function's ``boto3.client("lambda")`` (the consumer's starts, the settle pass's
reads) is answered by the service. A step of the runtime runs the settle pass function once.
"""

from __future__ import annotations

import functools
import json
import logging
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from outbox.local.clients import REGION
from outbox.local.durable_functions import LocalDurableFunctions
from outbox.local.functions import LocalFunction, code_on_path, environment, function_output
from outbox.local.resources import ACCOUNT
from outbox.local.template import StackSpec

if TYPE_CHECKING:
    from outbox.local.resources import LocalResources

SETTLE_HANDLER = "outbox.handlers.workflow_ends.handler"

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DurableFunctionSpec:
    function: str  # the function's logical id (its local name)
    alias_id: str
    alias: str
    execution_timeout: int

    @property
    def qualified_arn(self) -> str:
        return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{self.function}:{self.alias}"


def durable_functions(stack: StackSpec) -> list[DurableFunctionSpec]:
    """The template's durable functions, each by the alias its executions are started under."""
    template = json.loads((stack.assembly_dir / f"{stack.name}.template.json").read_text())
    resources: dict[str, Any] = template["Resources"]
    found = []
    for alias_id, alias in resources.items():
        if alias["Type"] != "AWS::Lambda::Alias":
            continue
        version = alias["Properties"]["FunctionVersion"]
        version_id = version["Fn::GetAtt"][0] if isinstance(version, dict) and "Fn::GetAtt" in version else None
        function = resources.get(version_id or "", {}).get("Properties", {}).get("FunctionName", {})
        function_id = function.get("Ref") if isinstance(function, dict) else None
        config = resources.get(function_id or "", {}).get("Properties", {}).get("DurableConfig")
        if function_id and config:
            found.append(
                DurableFunctionSpec(function_id, alias_id, alias["Properties"]["Name"], int(config["ExecutionTimeout"]))
            )
    return found


def name_aliases(stack: StackSpec, resources: LocalResources) -> None:
    """The durable functions' aliases, resolvable in the functions' environments (the consumer's
    ``WORKFLOW_FUNCTIONS``): before the functions are built."""
    for spec in durable_functions(stack):
        resources.aliases[spec.alias_id] = spec.qualified_arn


class LocalWorkflows:
    """The runtime's durable functions (``service``) and its settle pass (``settle``)."""

    def __init__(self, service: LocalDurableFunctions, settler: LocalFunction | None) -> None:
        self.service = service
        self.settler = settler
        # What the durable service had done when the last pass ran (``settle``): None until one ran, and after one
        # failed.
        self._seen: tuple[int, int, int] | None = None

    @classmethod
    def start(
        cls, stack: StackSpec, functions: dict[str, LocalFunction], exit_stack: ExitStack
    ) -> LocalWorkflows | None:
        """Register each durable function's handler and answer the functions' Lambda clients until the runtime
        stops; None when the template has no durable function."""
        specs = durable_functions(stack)
        if not specs:
            return None
        service = LocalDurableFunctions()
        exit_stack.callback(service.close)
        for spec in specs:
            handler = _imported(functions[spec.function])
            service.register(spec.qualified_arn, handler, execution_timeout=spec.execution_timeout)
        exit_stack.enter_context(service.serving_default_session())
        workflows = cls(service, _settler(functions))
        workflows.settle_after(functions)
        return workflows

    def settle_after(self, functions: dict[str, LocalFunction]) -> None:
        """Each function's invocations end with the executions they started run up to their first wait, when the
        service's ``settle_starts`` is set (a no-op otherwise)."""
        for function in functions.values():
            if self.service.settle_started not in function.after_invoke:
                function.after_invoke.append(self.service.settle_started)

    def reload(self, stack: StackSpec, functions: dict[str, LocalFunction]) -> None:
        """``stack``'s code (a code reload of a served runtime; the same durable functions, which the state's
        resources digest holds): each execution's next invocation runs its function's new code, replaying its
        checkpoints, as after a deploy of a new version behind the alias."""
        for spec in durable_functions(stack):
            self.service.replace_handler(spec.qualified_arn, _imported(functions[spec.function]))
        self.settler = _settler(functions)
        self.settle_after(functions)

    def settle(self) -> bool:
        """One settle pass, as its schedule would run it: True when it settled a pair. None runs before the first
        execution starts (nothing can be handed yet: a stack that never starts one sees no call of the pass), and
        none while nothing was started, asked to start, looked up or changed by an execution since the last pass: that
        pass found every ended execution's pair settled, or not handed yet (a hand-off follows a start's request, or a
        look-up by name after a start that failed, in the same invocation: an execution that ended before its pair
        was handed, a throttled start then finding it by name, is settled by the next pass), and this one would find
        the same. A pass that fails is what a failed scheduled run is on
        AWS: logged, and the next one tries again."""
        if self.settler is None or not self.service.executions():
            return False
        seen = (self.service.changes, self.service.start_requests, self.service.lookups)
        if seen == self._seen:
            return False
        self._seen = seen
        try:
            counts = self.settler.invoke({})
        except Exception as exc:  # a scheduled run's failure never stops the pipeline
            logger.warning("the workflow settle pass failed; the next one runs again: %r", exc)
            self._seen = None
            return False
        return bool(counts.get("completed") or counts.get("dead"))

    def wait_for_running(self, timeout: float = 30.0) -> bool:
        """Wait for the executions that run on their own (no callback awaited) to end: True when one did, and the
        settle pass has work (``LocalRuntime.run_until_idle`` waits so before it calls the pipeline idle)."""
        return self.service.wait_for_running(timeout)

    def wait_for_ends(self, timeout: int = 30) -> dict[str, str]:
        """Wait for every execution that is not waiting on a callback to end (the testing SDK skips waits' time);
        each execution's status, by name."""
        return {execution.name: self.service.wait(execution.arn, timeout) for execution in self.service.executions()}


def _imported(function: LocalFunction) -> Any:
    """A durable function's handler, imported as Lambda's cold start would, with its code and environment; the
    testing SDK runs it, on its own threads, each invocation in the function's environment and log."""
    with environment(function.env), code_on_path(function.code_root):
        handler = function.resolve()

    @functools.wraps(handler)
    def in_its_environment(event: Any, context: Any) -> Any:
        with environment(function.env), function_output(function.log):
            return handler(event, context)

    return in_its_environment


def _settler(functions: dict[str, LocalFunction]) -> LocalFunction | None:
    return next((f for f in functions.values() if f.handler_path == SETTLE_HANDLER), None)
