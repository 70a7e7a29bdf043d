"""Least privilege, measured on real calls: the pipeline's functions and the runbook's CLI commands run their
real work on the local runtime (happy paths, failures, dead letters, poison, a take-over, redrives, replays,
reconciliation), every AWS call they make is recorded (``tests.iam_calls``), and each role's synthesized
policy is checked against what its code called: no recorded call may be refused, and no action the policy
grants may go unused, but for the few named in ``KEPT_UNUSED``, each with its reason.

What is compared: the services the code calls (``RECORDED_SERVICES``). The rest of a function's policy is the
Lambda runtime's own (its log group, X-Ray: ``LAMBDA_RUNTIME_ACTIONS``), and nothing else may be there. The
application's tables are granted what a handler may ask of them (``queue_consumer.DATA_TABLE_ACTIONS``), which
the example's handlers need not all use: there a recorded call must be allowed and the grant must be exactly
that list. The runbook role (``outbox_cdk.runbook_role``) is held to the union of the commands' calls: each
command's calls must all be allowed, and every action it grants must be used by some command.
"""

from __future__ import annotations

import itertools
import json
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import boto3
import pytest
from typer.testing import CliRunner

from outbox import Envelope, TerminalError
from outbox.cli import app
from outbox.delivery.timing import WAKE_HERE_MIN_REMAINING_MS
from outbox.local import faults
from outbox.local.clients import REGION
from outbox.local.pipe import PipeFaults, TargetInvocationError
from outbox.ops import FailureGroup
from outbox.pairs.order import OrderBook
from outbox_cdk import operator_endpoint, status_widget
from outbox_cdk.queue_consumer import DATA_TABLE_ACTIONS
from stacks.app_factory import STACK_NAME
from stacks.outbox_stack import CATALOG
from tests.conftest import Synthesized
from tests.e2e.backends import LocalBackend, event_image, local_backend, send_raw
from tests.e2e.test_lanes_and_modes import function_url_event
from tests.e2e.test_ordered_subscriptions import JOURNAL, placed
from tests.e2e.test_pipeline import order_and_pay, unique
from tests.e2e.test_runbook import broken_consumer, operations
from tests.e2e.test_tamper_evidence import SCHEDULED_EVENT, rewrite_with_recomputed_hashes
from tests.iam_calls import CallRecorder, LocalArns, Request, RolePolicy, denied, iam_requests, unused_grants

# The functions whose roles are compared, by the stack output naming each (the endpoint has none: its handler).
DURABLE_CONSUMER = "DurableConsumerFunctionName"
RECORD_CHANGE_CONSUMER = "RecordChangeConsumerFunctionName"
OPERATOR_ENDPOINT = "operator endpoint"
STATUS_WIDGET = "status widget"
TAMPER_RECORDER = "TamperRecorderFunctionName"
ANCHORING = "AnchoringFunctionName"
PLACE_ORDER = "PlaceOrderFunctionName"  # the example's producer: a user copies its grants
# The functions that run the application's handlers: granted what a handler may ask (DATA_TABLE_ACTIONS).
HANDLER_RUNNERS = (DURABLE_CONSUMER, RECORD_CHANGE_CONSUMER)
FUNCTIONS = (
    DURABLE_CONSUMER,
    RECORD_CHANGE_CONSUMER,
    OPERATOR_ENDPOINT,
    STATUS_WIDGET,
    TAMPER_RECORDER,
    ANCHORING,
    PLACE_ORDER,
)

# The services whose calls are recorded and compared; what a function's policy holds besides is the Lambda
# runtime's: it writes the function's logs and traces with the function's role, no code of ours calls those.
RECORDED_SERVICES = ("dynamodb", "sqs", "pipes", "cloudwatch", "cloudformation", "kms")
# The WORKFLOW lane's Lambda calls are recorded and translated (tests/iam_calls.py), but not compared here: the local
# runtime's durable functions have no ARNs the template's references resolve to. The grants are pinned one by one
# in tests/infrastructure/test_workflow_function.py instead (the consumer: start and find; the settle pass: read
# an execution), and the consumer's GetDurableExecution, which it never calls, is gone.
PINNED_ELSEWHERE = {DURABLE_CONSUMER: {"lambda"}}
LAMBDA_RUNTIME_ACTIONS = {
    "logs:CreateLogStream",
    "logs:PutLogEvents",
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
}
# Granted on purpose though no recorded call used it: (function, action, the output naming the resource).
LAMBDA_POLLS_THE_QUEUE = (
    "Lambda's event source mapping reads the queue's attributes with the function's role (SQS developer guide, "
    "'Configuring an Amazon SQS queue to trigger an AWS Lambda function': the execution role's "
    "sqs:GetQueueAttributes); the local runtime's mapping does not call it"
)
KEPT_UNUSED = {
    (DURABLE_CONSUMER, "sqs:GetQueueAttributes", "DurableQueueUrl"): LAMBDA_POLLS_THE_QUEUE,
    (RECORD_CHANGE_CONSUMER, "sqs:GetQueueAttributes", "RecordChangeQueueUrl"): LAMBDA_POLLS_THE_QUEUE,
    (TAMPER_RECORDER, "sqs:GetQueueAttributes", "TamperQueueUrl"): LAMBDA_POLLS_THE_QUEUE,
    (ANCHORING, "sqs:SendMessage", "AnchoringDeadLetterQueueUrl"): (
        "Lambda sends an asynchronous invocation that failed its retries to the function's DeadLetterConfig with "
        "the function's role (Lambda developer guide, 'Dead-letter queues': the execution role needs "
        "sqs:SendMessage); the local runtime does not run the schedule's retries"
    ),
}

# Each runbook command is recorded as its own principal, "runbook:<command>". (``catalog`` calls no AWS.)
RUNBOOK = "runbook:"
RUNBOOK_COMMANDS = (
    "status",
    "verify-chain",
    "dead-letters list",
    "dead-letters show",
    "dead-letters poison",
    "dead-letters groups",
    "replay",
    "redrive",
    "reconcile",
    "findings",
    "skip",
)


@dataclass
class Recorded:
    recorder: CallRecorder
    arns: LocalArns
    template: dict[str, Any]
    principals: dict[str, str]  # FUNCTIONS -> the function's logical id (its recorded principal)
    exit_codes: dict[str, list[int]]  # runbook command -> the exit code of each run

    def requests(self, principal: str) -> list[Request]:
        return self.recorder.requests(principal, self.arns)

    def role_of(self, function_id: str) -> str:
        role: str = self.template["Resources"][function_id]["Properties"]["Role"]["Fn::GetAtt"][0]
        return role

    def policy(self, role_id: str) -> RolePolicy:
        return RolePolicy.of(self.template, role_id, self.arns)

    def runbook_policy(self) -> RolePolicy:
        [role_id] = [
            logical_id
            for logical_id, resource in self.template["Resources"].items()
            if resource["Type"] == "AWS::IAM::Role" and logical_id.startswith("OutboxRunbookRole")
        ]
        return self.policy(role_id)


@pytest.fixture(scope="module")
def recorded(synthesized: Synthesized) -> Iterator[Recorded]:
    recorder = CallRecorder()
    with (
        local_backend(synthesized.outdir, function_log_level="CRITICAL") as local,
        recorder.recording(),
        recorder.attributing(local.runtime),
    ):
        troubled = _drive_the_functions(local)
        stack_id = _publish_the_outputs(local)
        exit_codes = _run_the_runbook(local, recorder, troubled)
        _redeliver_after_the_inbox_forgot(local, troubled["tenant"])
        _check_completeness(local)
        principals = {
            DURABLE_CONSUMER: local.output(DURABLE_CONSUMER),
            RECORD_CHANGE_CONSUMER: local.output(RECORD_CHANGE_CONSUMER),
            OPERATOR_ENDPOINT: local.function_running(operator_endpoint.HANDLER).name,
            STATUS_WIDGET: local.function_running(status_widget.HANDLER).name,
            TAMPER_RECORDER: local.output(TAMPER_RECORDER),
            ANCHORING: local.output(ANCHORING),
            PLACE_ORDER: local.output(PLACE_ORDER),
        }
        yield Recorded(
            recorder, LocalArns(local.runtime, stack_id), synthesized.template(STACK_NAME), principals, exit_codes
        )


def _drive_the_functions(local: LocalBackend) -> dict[str, str]:
    """The consumers and the endpoint through their work: what the runbook repairs afterwards included."""
    tenant = unique("tenant")
    order_and_pay(local, tenant)  # the happy path: claims, completions, follow-up events, data-table writes
    _place_orders_through_the_producer(local)
    local.profile().change_address(local.store(), tenant=tenant, actor="e2e", profile_id="p1", address="2 Elm St")
    local.settle()
    with faults.fail_handler("pet_tag.mark_ordered", times=1):  # a failure that retries, then completes
        order_and_pay(local, tenant)
        local.settle()
    with faults.fail_handler("pet_tag.mark_ordered", times=1, error=lambda: TerminalError("registry said no")):
        dead = order_and_pay(local, tenant)  # a terminal failure: a DEAD claim and its dead letter
        local.settle()
    # An ordered subscription's event deferred behind a dead one, in a tenant of its own (the log rewrite below
    # would make every later delivery of this tenant a conflict).
    journaled = unique("tenant")
    _block_the_journal(local, journaled)
    notifier = local.service("notifier")
    notifier.fail_next = 10**6  # a service down on every attempt: exhausted pairs, dead letters
    order_and_pay(local, tenant)
    local.settle()
    notifier.fail_next = 0
    with faults.crash_after_claim(subscription="notify.buyer"):  # a lease taken over after its worker died
        order_and_pay(local, tenant)
        local.settle()
    send_raw(local, "not json", tenant, unique("poison"))  # a poison pill
    original = Envelope.from_item(event_image(local, tenant, 1))
    forged = original.model_copy(update={"payload": {**original.payload, "total_cents": 1}})
    send_raw(local, json.dumps(forged.model_copy(update={"hash": forged.computed_hash()}).to_item()), tenant, "forged")
    local.settle()  # a conflict: a known event id with other content
    for _ in range(2):  # the durable DLQ, twice over: one redrive by move task, one by receive-send-delete
        with broken_consumer():
            order_and_pay(local, tenant)
            local.settle()
    # A row change the record-change consumer cannot parse: failed on every receive, then in its DLQ.
    local.client("sqs").send_message(QueueUrl=local.output("RecordChangeQueueUrl"), MessageBody="not a record")
    local.settle()
    # The auditor: an anchoring pass, an overwritten event row (a finding), a tamper message it cannot read (its DLQ)
    local.runtime.function(ANCHORING).invoke(SCHEDULED_EVENT)
    rewrite_with_recomputed_hashes(local, tenant, seq=1)
    local.client("sqs").send_message(QueueUrl=local.output("TamperQueueUrl"), MessageBody="not a stream record")
    local.settle()
    local.runtime.function(ANCHORING).invoke(SCHEDULED_EVENT)  # the anchor contradicted: a finding
    endpoint = local.function_running(operator_endpoint.HANDLER)
    for path in ("/status", f"/tenants/{tenant}/chain", "/tenants/nobody/chain", "/dead-letters/groups"):
        assert endpoint.invoke(function_url_event(path))["statusCode"] in (200, 404)
    assert "need attention" in local.function_running(status_widget.HANDLER).invoke({"widgetContext": {}})
    return {"tenant": tenant, "dead": dead, "journaled": journaled}


def _place_orders_through_the_producer(local: LocalBackend) -> None:
    """The example's producer as its callers use it: an order placed, placed again (answered from the order
    row), and other content under the same id (refused)."""
    producer = local.runtime.function(PLACE_ORDER)
    request = {"tenant": unique("tenant"), "order_id": unique("order"), "buyer_email": "b@x.io"}
    items = [{"sku": "tag", "quantity": 1, "unit_price_cents": 700}]
    answers = [producer.invoke({**request, "items": items}) for _ in range(2)]
    answers.append(producer.invoke({**request, "items": [{**items[0], "quantity": 2}]}))
    assert [answer["status"] for answer in answers] == [201, 200, 409]


def _block_the_journal(local: LocalBackend, tenant: str) -> int:
    """A journal line (the example's ordered subscription) dies, and the next order's line is deferred behind
    it: the order book's reads and writes. The seq of the dead one."""
    with faults.fail_handler(JOURNAL, times=1, error=lambda: TerminalError("journal refused the line")):
        dead = placed(local, tenant)
        local.settle()
    placed(local, tenant)
    local.settle()
    return dead.seq


def _journal_waits_for(local: LocalBackend, tenant: str) -> int:
    """The seq the tenant's journal waits for, blocking it again first if nothing waits."""
    book = OrderBook(local.output("InboxTableName"), local.output("EventsTableName"), client=local.client("dynamodb"))
    if not book.deferred(tenant, JOURNAL, limit=1):
        _block_the_journal(local, tenant)
    [lowest] = book.deferred(tenant, JOURNAL, limit=1)
    return lowest.waits_for


def _publish_the_outputs(local: LocalBackend) -> str:
    """A CloudFormation stack (on moto) with the pipeline's outputs, so that the CLI connects with --stack as an
    operator's does: DescribeStacks, then boto3 clients of every service, CloudWatch included."""
    body = {
        "Resources": {"Nothing": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {name: {"Value": value} for name, value in local.runtime.outputs().items()},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # moto does not model the placeholder resource, and says so
        created = boto3.client("cloudformation", region_name=REGION).create_stack(
            StackName=STACK_NAME, TemplateBody=json.dumps(body)
        )
    stack_id: str = created["StackId"]
    return stack_id


def failure_groups(local: LocalBackend, tenant: str) -> list[FailureGroup]:
    """The tenant's failure groups, read outside the recorder (only the commands' calls are measured)."""
    return operations(local).failure_groups(tenant=tenant)


def _run_the_runbook(local: LocalBackend, recorder: CallRecorder, troubled: dict[str, str]) -> dict[str, list[int]]:
    tenant = troubled["tenant"]
    commands: list[list[str]] = [
        ["status"],
        ["verify-chain", "--all"],
        ["verify-chain", "--tenant", tenant],
        ["dead-letters", "list"],
        ["dead-letters", "list", "--tenant", tenant],
        ["dead-letters", "show", troubled["dead"], "--tenant", tenant],
        ["dead-letters", "poison"],
        ["dead-letters", "groups"],
        *(["replay", "--group", group.id, "--dry-run"] for group in failure_groups(local, tenant)),
        ["replay", "--tenant", tenant, "--dry-run"],
        ["replay", "--tenant", tenant, "--yes"],
        ["replay", "--event-id", troubled["dead"], "--subscription", "pet_tag.mark_ordered", "--force", "--yes"],
        # The dead line runs, and sends the line deferred behind it back to the queue: the invocation has too
        # little time left to run it too (see _cli).
        ["replay", "--tenant", troubled["journaled"], "--yes"],
        ["redrive", "--yes"],
        ["redrive", "--method", "receive-send-delete", "--yes"],
        ["redrive", "--dlq", "record-change-dlq", "--yes"],
        ["redrive", "--dlq", "tamper-dlq", "--yes"],
        ["findings"],
        ["findings", "--tenant", tenant],
    ]
    exit_codes: dict[str, list[int]] = {}
    for arguments in commands:
        hurried = troubled["journaled"] in arguments
        with mock.patch(
            "outbox.delivery.timing.WAKE_HERE_MIN_REMAINING_MS", 10**9 if hurried else WAKE_HERE_MIN_REMAINING_MS
        ):
            _cli(local, recorder, arguments, exit_codes)
        if arguments == ["redrive", "--yes"]:  # the second batch for the receive-send-delete redrive
            with broken_consumer():
                order_and_pay(local, tenant)
                local.settle()
    # The relay loses a payment's events: reconcile finds them unclaimed, vouches for them and re-sends them.
    relay = local.runtime.pipe("RelayPipeName")
    relay.faults = PipeFaults(before_send=_queue_refuses)
    order_and_pay(local, tenant)
    local.settle()
    relay.faults = PipeFaults()
    for arguments in (
        ["reconcile", "--since", "1h", "--dry-run"],
        ["reconcile", "--since", "1h", "--yes"],
        ["reconcile", "--subscription", JOURNAL, "--yes"],  # an ordered subscription, from its watermark
    ):
        _cli(local, recorder, arguments, exit_codes)
    # The journal blocked again; this time the operator lets it go on without the dead line.
    journaled = troubled["journaled"]
    seq = _journal_waits_for(local, journaled)
    skip = ["skip", "--tenant", journaled, "--subscription", JOURNAL, "--seq", str(seq), "--reason", "void", "--yes"]
    _cli(local, recorder, skip, exit_codes)
    return exit_codes


def _queue_refuses(_entries: Any) -> None:
    raise TargetInvocationError("AccessDenied: the pipe's role lost sqs:SendMessage")


def _cli(local: LocalBackend, recorder: CallRecorder, arguments: list[str], exit_codes: dict[str, list[int]]) -> None:
    """One CLI command as an operator runs it (--stack, its own clients), under its own principal."""
    command = " ".join(itertools.takewhile(lambda argument: not argument.startswith("-"), arguments[:2]))
    saved = dict(os.environ)  # the CLI sets the application's variables, as the functions have them
    try:
        with recorder.acting_as(RUNBOOK + command):
            result = CliRunner().invoke(
                app, ["--stack", STACK_NAME, "--region", REGION, "--catalog", CATALOG, "--json", *arguments]
            )
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert result.exit_code in (0, 1), (arguments, result.output)
    exit_codes.setdefault(command, []).append(result.exit_code)
    local.settle()  # the consumers run what the command re-sent or moved


def _redeliver_after_the_inbox_forgot(local: LocalBackend, tenant: str) -> None:
    """A month later, an event arrives again: the consumer cannot vouch for it and records it as unverifiable."""
    local.runtime.clock.advance(31 * 24 * 3600)
    local.runtime.sweep_expired_items()
    local.client("sqs").send_message(
        QueueUrl=local.output("DurableQueueUrl"),
        MessageBody=json.dumps(event_image(local, tenant, 2)),
        MessageGroupId=tenant,
        MessageDeduplicationId=unique("again"),
    )
    local.settle()


def _check_completeness(local: LocalBackend) -> None:
    """Two anchoring passes an hour apart, past the completeness bound of everything driven above: the first
    judges every event's pairs (the log and each event's claims), the second the pairs it held open (dead,
    deferred)."""
    for _ in range(2):
        local.runtime.function(ANCHORING).invoke(SCHEDULED_EVENT)
        local.runtime.clock.advance(3600)


# -- what was recorded ------------------------------------------------------------------------------------


def test_the_drive_reached_every_function_and_every_runbook_command(recorded: Recorded) -> None:
    for function in FUNCTIONS:
        assert recorded.requests(recorded.principals[function]), f"the {function} made no call"
    assert set(recorded.exit_codes) == set(RUNBOOK_COMMANDS)


def test_every_recorded_call_translates_to_iam_actions(recorded: Recorded) -> None:
    for call in recorded.recorder.calls:
        assert iam_requests(call, recorded.arns), call


@pytest.mark.parametrize("function", FUNCTIONS)
def test_no_call_a_function_made_is_refused_by_its_role(recorded: Recorded, function: str) -> None:
    principal = recorded.principals[function]
    policy = recorded.policy(recorded.role_of(principal))
    compared = [r for r in recorded.requests(principal) if r.action.split(":")[0] in RECORDED_SERVICES]
    assert denied(policy, compared) == []


@pytest.mark.parametrize("function", FUNCTIONS)
def test_no_action_a_function_is_granted_goes_unused(recorded: Recorded, function: str) -> None:
    principal = recorded.principals[function]
    policy = recorded.policy(recorded.role_of(principal))
    assert policy.services() <= {*RECORDED_SERVICES, "logs", "xray", *PINNED_ELSEWHERE.get(function, set())}
    assert {a for s in policy.statements for a in s.actions if a.split(":")[0] in ("logs", "xray")} <= (
        LAMBDA_RUNTIME_ACTIONS
    )
    kept = {
        (action, _resource_of(recorded, output)) for (kept_for, action, output) in KEPT_UNUSED if kept_for == function
    }
    unused = unused_grants(policy, recorded.requests(principal), RECORDED_SERVICES) - kept
    if function in HANDLER_RUNNERS:  # granted what a handler may ask of the data table: the test below
        data_table = recorded.arns.table(recorded.arns.runtime.output("DataTableName"))
        unused = {(action, resource) for action, resource in unused if resource != data_table}
    assert unused == set()


@pytest.mark.parametrize("function", HANDLER_RUNNERS)
def test_on_the_applications_table_a_consumer_may_do_what_a_handler_may_ask_and_no_more(
    recorded: Recorded, function: str
) -> None:
    policy = recorded.policy(recorded.role_of(recorded.principals[function]))
    data_table = recorded.arns.table(recorded.arns.runtime.output("DataTableName"))
    granted = {action for action, resource in policy.granted(RECORDED_SERVICES) if resource == data_table}
    assert granted == set(DATA_TABLE_ACTIONS)


def test_each_kept_grant_is_still_granted(recorded: Recorded) -> None:
    """An exception that no longer excuses anything is removed, not left to excuse a future grant."""
    for function, action, output in KEPT_UNUSED:
        policy = recorded.policy(recorded.role_of(recorded.principals[function]))
        assert (action, _resource_of(recorded, output)) in policy.granted(RECORDED_SERVICES)


def _resource_of(recorded: Recorded, output: str) -> str:
    return recorded.arns.queue(recorded.arns.runtime.output(output))


def test_the_evaluator_refuses_what_the_policy_refuses(recorded: Recorded) -> None:
    """Not a permissive evaluator: the event-row Deny binds the durable consumer, and what no statement
    names is refused."""
    principal = recorded.principals[DURABLE_CONSUMER]
    policy = recorded.policy(recorded.role_of(principal))
    events = recorded.arns.table(recorded.arns.runtime.output("EventsTableName"))
    rewrite = Request("dynamodb:UpdateItem", events, "UpdateItem", ("TENANT#acme#EVENT",))
    head = Request("dynamodb:UpdateItem", events, "UpdateItem", ("TENANT#acme#HEAD",))
    assert policy.denial(rewrite) == "denied by DenyEventRowMutation"
    assert policy.denial(head) is None
    assert policy.denial(Request("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:Other", "SendMessage"))
    runbook = recorded.runbook_policy()
    assert runbook.denial(rewrite) == "denied by DenyEventRowMutation", "the runbook never changes an event row"
    # On the inbox it queries and deletes an ordered subscription's rows only, never a dead letter or a claim
    inbox = recorded.arns.table(recorded.arns.runtime.output("InboxTableName"))
    deferred = Request("dynamodb:DeleteItem", inbox, "DeleteItem", ("TENANT#acme#ORDER#ledger.journal",))
    letter = Request("dynamodb:DeleteItem", inbox, "DeleteItem", ("TENANT#acme#DEAD",))
    assert policy.denial(deferred) is None
    assert policy.denial(letter) is not None
    # The tamper recorder adds findings, and cannot move an anchor
    recorder = recorded.policy(recorded.role_of(recorded.principals[TAMPER_RECORDER]))
    audit = recorded.arns.table(recorded.arns.runtime.output("AuditTableName"))
    assert recorder.denial(Request("dynamodb:PutItem", audit, "PutItem", ("TENANT#acme#FINDING",))) is None
    assert recorder.denial(Request("dynamodb:PutItem", audit, "PutItem", ("TENANT#acme#ANCHOR",))) is not None


# -- the runbook role -------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", RUNBOOK_COMMANDS)
def test_no_call_a_runbook_command_made_is_refused_by_the_runbook_role(recorded: Recorded, command: str) -> None:
    assert denied(recorded.runbook_policy(), recorded.requests(RUNBOOK + command)) == []


def test_every_action_the_runbook_role_grants_is_used_by_some_command(recorded: Recorded) -> None:
    policy = recorded.runbook_policy()
    assert policy.services() <= set(RECORDED_SERVICES)
    every_command = [request for command in RUNBOOK_COMMANDS for request in recorded.requests(RUNBOOK + command)]
    assert unused_grants(policy, every_command, RECORDED_SERVICES) == set()
