"""What code really asks of AWS, as IAM sees it: every API call of every boto3 client in this process,
attributed to the principal that makes it, translated to the IAM actions and resources it needs, and
checked against a role's synthesized policy.

    recorder = CallRecorder()
    with recorder.recording(), recorder.attributing(runtime):   # each function's calls are its role's
        ...drive the pipeline...
        with recorder.acting_as("runbook:status"):
            ...run a CLI command...
    requests = recorder.requests("runbook:status", LocalArns(runtime))

Where the calls are seen: botocore's global history recorder (``botocore.history``), which every client's
``_make_api_call`` reports to with the service, the operation and the parameters as the caller gave them,
paginated pages included. An event handler (``before-call.*.*``) lives on one client's copy of its
session's emitter, and the clients here are made everywhere: by the local runtime before a test starts,
by each function container at its first invocation, by the CLI as it connects; the history recorder sees
them all, whenever they were made.

Who makes a call: the principal of ``acting_as`` (a context variable), or, under ``attributing``, the
function whose container runs (its logical id) or whose event source mapping polls its queue: Lambda's
poller receives and deletes with the function's execution role. A call outside both is not recorded (the
test's own reads and writes, the pipes' emulation).

The translation (``iam_requests``) covers the operations this project calls and fails on any other, so a
new call cannot slip past the comparison; each rule says where its IAM action comes from. The evaluator
(``RolePolicy``) is deliberately small: Allow and Deny statements with Action and Resource (wildcards ``*``
and ``?``), the condition operators the pipeline's policies use on ``dynamodb:LeadingKeys``, and an
explicit Deny winning. Anything else in a policy (NotAction, another condition) makes it refuse rather than
guess. moto's own evaluator (``moto.iam.access_control``) is not used: it ignores every condition operator
but StringEquals, so it would read the event-row Deny as unconditional and deny the chain head's update.
"""

from __future__ import annotations

import contextvars
import fnmatch
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from botocore.history import BaseHistoryHandler, get_global_history_recorder

from outbox.local.clients import REGION
from outbox.local.runtime import ACCOUNT, LocalRuntime
from outbox.local.template import Reference, TemplateError

_principal: contextvars.ContextVar[str | None] = contextvars.ContextVar("aws_principal", default=None)


@dataclass(frozen=True)
class Call:
    """One API call as the caller made it."""

    principal: str
    service: str  # botocore's service name: dynamodb, sqs, pipes, cloudwatch, cloudformation, ...
    operation: str  # the API operation: TransactWriteItems
    params: Mapping[str, Any]


@dataclass(frozen=True)
class Request:
    """One IAM authorisation a call needs: an action on a resource (an ARN, or "*" for an action that has
    no resource-level permissions), with the condition keys the pipeline's policies test."""

    action: str  # dynamodb:PutItem
    resource: str
    operation: str  # the call it is part of
    leading_keys: tuple[str, ...] = ()  # dynamodb:LeadingKeys: the partition key values it touches

    def __str__(self) -> str:
        keys = f" (keys {', '.join(self.leading_keys)})" if self.leading_keys else ""
        via = "" if self.action.endswith(f":{self.operation}") else f" via {self.operation}"
        return f"{self.action} on {self.resource}{via}{keys}"


class UntranslatedCallError(ValueError):
    """A call whose IAM actions this module does not know: add its rule to ``iam_requests`` (with the AWS
    page it comes from) rather than let it pass unchecked."""


# -- recording ----------------------------------------------------------------------------------------


class CallRecorder(BaseHistoryHandler):  # type: ignore[misc]
    """Every call made while ``recording()`` by an attributed principal, in order."""

    _installed: CallRecorder | None = None  # the history recorder keeps handlers forever: one forwarder

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def emit(self, event_type: str, payload: Any, source: str) -> None:
        principal = _principal.get()
        if event_type == "API_CALL" and principal is not None:
            self.calls.append(Call(principal, payload["service"], payload["operation"], dict(payload["params"])))

    @contextmanager
    def recording(self) -> Iterator[CallRecorder]:
        history = get_global_history_recorder()
        _Forwarder.install(history)
        _Forwarder.target = self
        history.enable()
        try:
            yield self
        finally:
            _Forwarder.target = None
            history.disable()

    @staticmethod
    @contextmanager
    def acting_as(principal: str) -> Iterator[None]:
        token = _principal.set(principal)
        try:
            yield
        finally:
            _principal.reset(token)

    @contextmanager
    def attributing(self, runtime: LocalRuntime) -> Iterator[None]:
        """Each function's calls, and its event source mapping's, as its own (its logical id)."""
        restore: list[Callable[[], None]] = []
        for function in runtime.functions.values():
            restore.append(_act_during(function, "invoke", function.name))
        for mapping in runtime.mappings.values():
            restore.append(_act_during(mapping, "poll", mapping.function_name))
        try:
            yield
        finally:
            for undo in restore:
                undo()

    def principals(self) -> set[str]:
        return {call.principal for call in self.calls}

    def of(self, principal: str) -> list[Call]:
        return [call for call in self.calls if call.principal == principal]

    def requests(self, principal: str, arns: LocalArns) -> list[Request]:
        return [request for call in self.of(principal) for request in iam_requests(call, arns)]


class _Forwarder(BaseHistoryHandler):  # type: ignore[misc]
    target: CallRecorder | None = None
    _added = False

    @classmethod
    def install(cls, history: Any) -> None:
        if not cls._added:
            history.add_handler(cls())
            cls._added = True

    def emit(self, event_type: str, payload: Any, source: str) -> None:
        if _Forwarder.target is not None:
            _Forwarder.target.emit(event_type, payload, source)


def _act_during(target: Any, method: str, principal: str) -> Callable[[], None]:
    """Wrap ``target.method`` (an instance attribute now) so that what it calls is ``principal``'s."""
    original = getattr(target, method)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with CallRecorder.acting_as(principal):
            return original(*args, **kwargs)

    setattr(target, method, wrapped)
    return lambda: delattr(target, method)


# -- where things are ---------------------------------------------------------------------------------


@dataclass
class LocalArns:
    """The ARN of each local table, queue, pipe and stack, as a policy in this account and region names it;
    and the template's references resolved to the same ARNs."""

    runtime: LocalRuntime
    stack_id: str | None = None  # the CloudFormation stack the CLI described, if one was made
    _queue_arns: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        resources = self.runtime.resources
        self._queue_arns = {resources.queue_urls[lid]: arn for lid, arn in resources.queue_arns.items()}

    def table(self, name: str) -> str:
        return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"

    def queue(self, url: str) -> str:
        return self._queue_arns[url]

    def pipe(self, name: str) -> str:
        return f"arn:aws:pipes:{REGION}:{ACCOUNT}:pipe/{name}"

    def stack(self, name: str) -> str:
        assert self.stack_id is not None, "no stack was made"
        assert f":stack/{name}/" in self.stack_id, f"no stack {name} was made"
        return self.stack_id

    def partition_key(self, table_name: str) -> str:
        spec = self.runtime.stack.tables[table_name]  # local table names are the logical ids
        return next(k["AttributeName"] for k in spec.key_schema if k["KeyType"] == "HASH")

    def redrive_sources(self, dead_letter_queue_arn: str) -> list[str]:
        """The queues whose redrive policy names this DLQ: where a move task without a destination sends."""
        resources = self.runtime.resources
        return [
            resources.queue_arns[spec.logical_id]
            for spec in self.runtime.stack.queues.values()
            if spec.dead_letter_queue and resources.queue_arns[spec.dead_letter_queue] == dead_letter_queue_arn
        ]

    def resolve(self, value: Any) -> list[str]:
        """A policy's Resource value as ARNs (an unresolvable reference as ``unresolved:<id>.<attribute>``,
        which no request matches: log groups, topics, keys the runtime does not create)."""
        if isinstance(value, list):
            return [arn for item in value for arn in self.resolve(item)]
        if isinstance(value, str):
            return [value]
        if isinstance(value, Mapping) and "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            pieces = [self.resolve(part) for part in parts]
            if any(len(piece) != 1 for piece in pieces):
                return []  # AWS::NoValue inside a join: CloudFormation drops the whole value
            return [str(separator).join(piece[0] for piece in pieces)]
        reference = Reference.parse(value)
        if reference is None:
            raise TemplateError(f"cannot resolve {value!r} in a policy")
        return self._reference(reference)

    def _reference(self, reference: Reference) -> list[str]:
        pseudo = {
            "AWS::Partition": "aws",
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackId": self.stack_id or "unresolved:AWS::StackId",
        }
        if reference.attribute is None and reference.logical_id == "AWS::NoValue":
            return []
        if reference.attribute is None and reference.logical_id in pseudo:
            return [pseudo[reference.logical_id]]
        if reference.attribute == "Arn" and reference.logical_id in self.runtime.resources.pipe_names:
            return [self.pipe(self.runtime.resources.pipe_names[reference.logical_id])]
        try:
            return [self.runtime.resources.resolve(reference)]
        except TemplateError:
            return [f"unresolved:{reference.logical_id}.{reference.attribute}"]


# -- translation ----------------------------------------------------------------------------------------

# The IAM action of an operation that is authorised as itself, on the one resource its parameters name.
_DYNAMODB_ITEM_OPERATIONS = frozenset({"GetItem", "PutItem", "UpdateItem", "DeleteItem"})
# TransactWriteItems is authorised per item, as the action of its kind, on the item's table (DynamoDB
# developer guide, "Using IAM with DynamoDB transactions"); TransactGetItems likewise, as GetItem.
_TRANSACT_ITEM_ACTIONS = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
    "Get": "dynamodb:GetItem",
}
# SQS: a batch call is authorised as its single-message action (SQS API reference, each *Batch page).
_SQS_ACTIONS = {
    "SendMessage": "sqs:SendMessage",
    "SendMessageBatch": "sqs:SendMessage",
    "ReceiveMessage": "sqs:ReceiveMessage",
    "DeleteMessage": "sqs:DeleteMessage",
    "DeleteMessageBatch": "sqs:DeleteMessage",
    "ChangeMessageVisibility": "sqs:ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
    "GetQueueAttributes": "sqs:GetQueueAttributes",
}
# StartMessageMoveTask is authorised on the DLQ (its SourceArn) and, as SQS moves the messages with the
# caller's permissions, needs what a receive-and-delete on the DLQ and a send to each destination need
# (SQS developer guide, "Configure a dead-letter queue redrive", required permissions).
_MOVE_TASK_SOURCE_ACTIONS = (
    "sqs:StartMessageMoveTask",
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:GetQueueAttributes",
)
_KEY_CONDITION_PARTITION = re.compile(r"^\s*(#?\w+)\s*=\s*(:\w+)")


def iam_requests(call: Call, arns: LocalArns) -> list[Request]:
    """The IAM requests one call needs; ``UntranslatedCallError`` for an operation without a rule here."""
    params, operation = call.params, call.operation
    if call.service == "dynamodb":
        return _dynamodb(operation, params, arns)
    if call.service == "sqs":
        return _sqs(operation, params, arns)
    if call.service == "pipes" and operation == "DescribePipe":
        return [Request("pipes:DescribePipe", arns.pipe(params["Name"]), operation)]
    if call.service == "cloudwatch" and operation == "GetMetricData":
        # No resource-level permissions (Service Authorization Reference, Amazon CloudWatch).
        return [Request("cloudwatch:GetMetricData", "*", operation)]
    if call.service == "cloudformation" and operation == "DescribeStacks":
        return [Request("cloudformation:DescribeStacks", arns.stack(params["StackName"]), operation)]
    if call.service == "lambda" and operation in _LAMBDA_ACTIONS:
        return [Request(_LAMBDA_ACTIONS[operation], _lambda_resource(operation, params), operation)]
    raise UntranslatedCallError(f"{call.principal} called {call.service}.{operation}: no IAM rule for it here")


# The WORKFLOW lane's calls (outbox.workflows.starter), each authorised as itself on the one resource it names
# (Service Authorization Reference, AWS Lambda): a start on the alias, a search by name on the qualified function,
# a read of one execution.
_LAMBDA_ACTIONS = {
    "Invoke": "lambda:InvokeFunction",
    "ListDurableExecutionsByFunction": "lambda:ListDurableExecutionsByFunction",
    "GetDurableExecution": "lambda:GetDurableExecution",
}


def _lambda_resource(operation: str, params: Mapping[str, Any]) -> str:
    if operation == "GetDurableExecution":
        return str(params["DurableExecutionArn"])
    function = str(params["FunctionName"])
    return f"{function}:{params['Qualifier']}" if params.get("Qualifier") else function


def _dynamodb(operation: str, params: Mapping[str, Any], arns: LocalArns) -> list[Request]:
    if operation in _DYNAMODB_ITEM_OPERATIONS:
        table = params["TableName"]
        item = params.get("Key") or params["Item"]
        return [Request(f"dynamodb:{operation}", arns.table(table), operation, _leading(item, table, arns))]
    if operation == "Query":
        table = params["TableName"]
        resource = arns.table(table) + (f"/index/{params['IndexName']}" if "IndexName" in params else "")
        return [Request("dynamodb:Query", resource, operation, (_queried_partition(params, table, arns),))]
    if operation == "BatchGetItem":
        # Authorised as itself, once per table, on every key it reads (the leading keys of each).
        return [
            Request(
                "dynamodb:BatchGetItem",
                arns.table(table),
                operation,
                tuple(sorted({leading for key in request["Keys"] for leading in _leading(key, table, arns)})),
            )
            for table, request in params["RequestItems"].items()
        ]
    if operation in ("TransactWriteItems", "TransactGetItems"):
        requests = []
        for entry in params["TransactItems"]:
            ((kind, body),) = entry.items()
            table = body["TableName"]
            item = body.get("Key") or body["Item"]
            requests.append(
                Request(_TRANSACT_ITEM_ACTIONS[kind], arns.table(table), operation, _leading(item, table, arns))
            )
        return requests
    raise UntranslatedCallError(f"dynamodb.{operation}: no IAM rule for it here")


def _leading(item: Mapping[str, Any], table: str, arns: LocalArns) -> tuple[str, ...]:
    value = item[arns.partition_key(table)]
    return (str(next(iter(value.values()))),)


def _queried_partition(params: Mapping[str, Any], table: str, arns: LocalArns) -> str:
    """The partition a Query reads: the value its key condition binds to the partition key."""
    match = _KEY_CONDITION_PARTITION.match(params["KeyConditionExpression"])
    if match is None:
        raise UntranslatedCallError(f"cannot read the partition of {params['KeyConditionExpression']!r}")
    name, placeholder = match.groups()
    name = params.get("ExpressionAttributeNames", {}).get(name, name)
    if name != arns.partition_key(table):
        raise UntranslatedCallError(f"the key condition {params['KeyConditionExpression']!r} starts with a sort key")
    return str(next(iter(params["ExpressionAttributeValues"][placeholder].values())))


def _sqs(operation: str, params: Mapping[str, Any], arns: LocalArns) -> list[Request]:
    if operation in _SQS_ACTIONS:
        return [Request(_SQS_ACTIONS[operation], arns.queue(params["QueueUrl"]), operation)]
    if operation == "StartMessageMoveTask":
        source = params["SourceArn"]
        destinations = [params["DestinationArn"]] if "DestinationArn" in params else arns.redrive_sources(source)
        return [Request(action, source, operation) for action in _MOVE_TASK_SOURCE_ACTIONS] + [
            Request("sqs:SendMessage", destination, operation) for destination in destinations
        ]
    if operation == "ListMessageMoveTasks":
        return [Request("sqs:ListMessageMoveTasks", params["SourceArn"], operation)]
    raise UntranslatedCallError(f"sqs.{operation}: no IAM rule for it here")


# -- evaluation -------------------------------------------------------------------------------------------


class UnsupportedPolicyError(ValueError):
    """A policy element this evaluator does not evaluate: extend it with care, or keep the policy simple."""


@dataclass(frozen=True)
class Statement:
    sid: str | None
    effect: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    conditions: Mapping[str, Mapping[str, Any]]

    def matches(self, request: Request) -> bool:
        return (
            any(fnmatch.fnmatch(request.action.lower(), action.lower()) for action in self.actions)
            and any(fnmatch.fnmatchcase(request.resource, resource) for resource in self.resources)
            and _conditions_hold(self.conditions, request)
        )


def _conditions_hold(conditions: Mapping[str, Mapping[str, Any]], request: Request) -> bool:
    context: dict[str, tuple[str, ...]] = {}
    if request.leading_keys:
        context["dynamodb:LeadingKeys"] = request.leading_keys
    for operator, tests in conditions.items():
        for key, expected in tests.items():
            patterns = expected if isinstance(expected, list) else [expected]
            present = context.get(key)
            if operator == "ForAnyValue:StringLike":
                held = present is not None and any(
                    fnmatch.fnmatchcase(value, pattern) for value in present for pattern in patterns
                )
            elif operator == "ForAllValues:StringLike":
                held = present is None or all(
                    any(fnmatch.fnmatchcase(value, pattern) for pattern in patterns) for value in present
                )
            elif operator == "Null":
                held = (present is None) == (str(patterns[0]).lower() == "true")
            else:
                raise UnsupportedPolicyError(f"condition operator {operator} is not evaluated here")
            if not held:
                return False
    return True


@dataclass(frozen=True)
class RolePolicy:
    """Every statement of the IAM policies attached to one role of the template, resources resolved."""

    role: str
    statements: tuple[Statement, ...]

    @classmethod
    def of(cls, template: Mapping[str, Any], role_id: str, arns: LocalArns) -> RolePolicy:
        statements = []
        for resource in template["Resources"].values():
            if resource["Type"] not in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                continue
            if {"Ref": role_id} not in resource["Properties"].get("Roles", []):
                continue
            for raw in resource["Properties"]["PolicyDocument"]["Statement"]:
                unsupported = {"NotAction", "NotResource", "NotPrincipal", "Principal"} & set(raw)
                if unsupported:
                    raise UnsupportedPolicyError(f"{role_id}: {sorted(unsupported)} are not evaluated here")
                statements.append(
                    Statement(
                        sid=raw.get("Sid"),
                        effect=raw["Effect"],
                        actions=tuple(_listed(raw["Action"])),
                        resources=tuple(arns.resolve(raw["Resource"])),
                        conditions=raw.get("Condition", {}),
                    )
                )
        role = template["Resources"][role_id]["Properties"]
        if role.get("ManagedPolicyArns") or role.get("Policies"):
            raise UnsupportedPolicyError(f"{role_id} has managed or inline policies, which are not read here")
        return cls(role_id, tuple(statements))

    def denial(self, request: Request) -> str | None:
        """Why ``request`` would be refused (None: allowed). An explicit Deny wins over every Allow."""
        for statement in self.statements:
            if statement.effect == "Deny" and statement.matches(request):
                return f"denied by {statement.sid or 'a Deny statement'}"
        if any(statement.effect == "Allow" and statement.matches(request) for statement in self.statements):
            return None
        return "allowed by no statement"

    def granted(self, services: Sequence[str]) -> set[tuple[str, str]]:
        """Each (action, resource) an Allow statement names, for the services given (the prefixes)."""
        return {
            (action, resource)
            for statement in self.statements
            if statement.effect == "Allow"
            for action in statement.actions
            if action.split(":")[0] in services
            for resource in statement.resources
        }

    def services(self) -> set[str]:
        return {action.split(":")[0] for statement in self.statements for action in statement.actions}


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def unused_grants(policy: RolePolicy, requests: Sequence[Request], services: Sequence[str]) -> set[tuple[str, str]]:
    """The granted (action, resource) pairs of ``services`` that no allowed request used."""
    allowed = [request for request in requests if policy.denial(request) is None]
    return {
        (action, resource)
        for action, resource in policy.granted(services)
        if not any(
            fnmatch.fnmatch(request.action.lower(), action.lower()) and fnmatch.fnmatchcase(request.resource, resource)
            for request in allowed
        )
    }


def denied(policy: RolePolicy, requests: Sequence[Request]) -> list[str]:
    """Each request the policy would refuse, with why, once."""
    found: dict[str, None] = {}
    for request in requests:
        why = policy.denial(request)
        if why is not None:
            found[f"{request}: {why}"] = None
    return list(found)
