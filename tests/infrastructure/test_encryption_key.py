"""``OutboxPipeline(encryption_key=...)``: one customer-managed key for the pipeline's tables, queues and logs,
and on it exactly what each principal needs; cdk-nag and checkov pass on the result.

A throwaway app (no bundling) with the example's data table, a key of its own and a producer of its own,
synthesized once with both cdk-nag packs, as the example app is. Without a key nothing changes: the example
stack passes none, so its snapshot (``test_snapshot``) and the checks below on its template hold that.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Final

import pytest
from aws_cdk import App, Duration, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks, ServerlessChecks

from modules.services import SERVICES_VARIABLE
from outbox_cdk import Alarms, OutboxPipeline, RecordChanges, checkov, encryption
from outbox_cdk.queue_defaults import DATA_KEY_REUSE
from stacks import outbox_stack
from stacks.data_table import DataTable
from tests.conftest import CDK_JSON_CONTEXT, Synthesized
from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.template_queries import listed, only_resource, role_statements
from tests.infrastructure.test_checkov import applied_skips, asked_skips, failed_checks, find_checkov, run_checkov

STACK: Final = "Keyed"
KEY_ID: Final = "Key"
# The checks a customer-managed key satisfies, suppressed (with checkov.CUSTOMER_KEY_OPTION) only without one.
CUSTOMER_KEY_CHECKS: Final = {"CKV_AWS_119", "CKV_AWS_27", "CKV_AWS_158"}
# Every principal that reads or writes the pipeline's tables, streams or queues, by its role's logical id
# prefix, and the key actions it needs: kms:Decrypt to read (an encrypted stream, queue or table) and
# kms:GenerateDataKey as well to write (SendMessage to an SSE-KMS queue, an item into an encrypted table).
READ = ("kms:Decrypt",)
READ_WRITE = ("kms:Decrypt", "kms:GenerateDataKey")
PRINCIPALS: Final = {
    "OutboxDurableConsumerLambdaRole": READ_WRITE,  # the durable queue; the inbox; emit() into the events
    "OutboxRecordChangeConsumerLambdaRole": READ,  # the record-change queue (the data table is the app's)
    "OutboxOperatorEndpointLambdaRole": READ,  # the events and inbox tables
    "OutboxStatusWidgetLambdaRole": READ,  # the same
    "OutboxRelayRole": READ_WRITE,  # the events stream; the durable queue and the relay DLQ
    "OutboxRecordChangePipeRole": READ_WRITE,  # the record-change queue and its pipe DLQ
    "OutboxEventsOperatorRole": READ_WRITE,  # repair: every item of the events table
    "OutboxRunbookRole": READ_WRITE,  # the runbook: the tables' items, receives from the DLQs, sends repairs
    "Producer": READ_WRITE,  # a producer of the app's, granted grant_emit
    "OutboxAuditorPipeRole": READ_WRITE,  # the events stream; the tamper queue and its pipe DLQ
    "OutboxAuditorRecorderLambdaRole": READ_WRITE,  # the tamper queue; findings into the audit table
    "OutboxAuditorAnchoringRole": READ_WRITE,  # the events table; anchors into the audit table
}
# The roles whose policies hold CDK's own wildcard key actions (a table's read-write or a queue's send grant),
# each acknowledged to cdk-nag on that policy and nowhere else.
WILDCARD_KEY_GRANTS: Final = {
    "Keyed/Outbox/Events/OperatorRole/DefaultPolicy/Resource",
    "Keyed/Outbox/Relay/Role/DefaultPolicy/Resource",
    "Keyed/Outbox/RecordChangePipe/Role/DefaultPolicy/Resource",
    "Keyed/Outbox/Auditor/Pipe/Role/DefaultPolicy/Resource",
}


def new_key(stack: Stack) -> kms.IKey:
    return kms.Key(stack, KEY_ID, enable_key_rotation=True, pending_window=Duration.days(30))


def keyed_app(outdir: str, make_key: Callable[[Stack], kms.IKey] = new_key) -> tuple[App, Stack]:
    """The example's data table and a producer of the app's, with a pipeline encrypted with the key
    ``make_key`` gives in the stack, and both cdk-nag packs."""
    app = App(context={**CDK_JSON_CONTEXT, "aws:cdk:bundling-stacks": []}, outdir=outdir)
    stack = Stack(app, STACK)
    key = make_key(stack)
    data = DataTable(stack, "Data")
    pipeline = OutboxPipeline(
        stack,
        "Outbox",
        code=lambda_.Code.from_asset(str(outbox_stack.PROJECT_ROOT), exclude=outbox_stack.CODE_EXCLUDE),
        catalog=outbox_stack.CATALOG,
        data_tables=[data.table],
        record_changes=RecordChanges(data.table),
        environment={"DATA_TABLE_NAME": data.table.table_name, SERVICES_VARIABLE: "fake"},
        encryption_key=key,
        alarms=Alarms.email("ops@example.com"),
        operators=[iam.AccountRootPrincipal()],
        watch_control_plane=True,  # its DLQ is one more queue on the key, written by EventBridge
    )
    producer = iam.Role(stack, "Producer", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    pipeline.grant_emit(producer)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app), ServerlessChecks(app))
    return app, stack


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    outdir = tmp_path_factory.mktemp("keyed.cdk.out")
    app, _ = keyed_app(str(outdir))
    assembly = app.synth()  # cdk-nag runs here: an unacknowledged finding raises
    templates = {stack.stack_name: json.loads(Path(stack.template_full_path).read_text()) for stack in assembly.stacks}
    return Synthesized(outdir=outdir, templates=templates)


@pytest.fixture(scope="module")
def keyed_template(keyed: Synthesized) -> dict[str, Any]:
    return keyed.template(STACK)


@pytest.fixture(scope="module")
def key_id(keyed_template: dict[str, Any]) -> str:
    logical_id, _ = only_resource(keyed_template, "AWS::KMS::Key", KEY_ID)
    return logical_id


def key_arn(key_id: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [key_id, "Arn"]}


def test_the_events_and_inbox_tables_are_encrypted_with_the_key_and_the_apps_table_is_not_touched(
    keyed_template: dict[str, Any], key_id: str
) -> None:
    tables = resources_of_type(keyed_template, "AWS::DynamoDB::Table")
    sse = {
        logical_id.split("Table")[0]: table["Properties"]["SSESpecification"] for logical_id, table in tables.items()
    }
    keyed = {"SSEEnabled": True, "SSEType": "KMS", "KMSMasterKeyId": key_arn(key_id)}
    assert sse == {
        "OutboxEvents": keyed,
        "OutboxInbox": keyed,
        "OutboxAudit": keyed,
        "Data": {"SSEEnabled": True},  # the application's own: AWS-managed, as it was made
    }


def test_every_queue_and_dead_letter_queue_uses_sse_kms_with_the_key(
    keyed_template: dict[str, Any], key_id: str
) -> None:
    queues = resources_of_type(keyed_template, "AWS::SQS::Queue")
    # Two lanes and the tamper lane, each a queue with its DLQ and a pipe with its DLQ; the anchoring's DLQ; the
    # WORKFLOW settle pass's DLQ; the control-plane watch's DLQ.
    assert len(queues) == 12, sorted(queues)
    for logical_id, queue in queues.items():
        properties = queue["Properties"]
        assert properties["KmsMasterKeyId"] == key_arn(key_id), logical_id
        assert properties["KmsDataKeyReusePeriodSeconds"] == DATA_KEY_REUSE.to_seconds(), logical_id
        assert "SqsManagedSseEnabled" not in properties, logical_id


def test_every_log_group_of_the_pipeline_uses_the_key(keyed_template: dict[str, Any], key_id: str) -> None:
    log_groups = resources_of_type(keyed_template, "AWS::Logs::LogGroup")
    # Eight functions (two consumers, the operator endpoint, the status widget, the tamper recorder, the anchoring,
    # the example's workflow and its settle pass), three pipes and the function that sets the lane DLQs' redrive
    # allow policies.
    assert len(log_groups) == 12, sorted(log_groups)
    for logical_id, log_group in log_groups.items():
        assert log_group["Properties"]["KmsKeyId"] == key_arn(key_id), logical_id


def test_the_key_policy_admits_cloudwatch_logs_for_this_accounts_log_groups_only(
    keyed_template: dict[str, Any], key_id: str
) -> None:
    statements = keyed_template["Resources"][key_id]["Properties"]["KeyPolicy"]["Statement"]
    services = [s for s in statements if "Service" in s.get("Principal", {})]
    # EventBridge's statement (the anchoring schedule's and the control-plane watch's DLQs) is the other one.
    logs = [{**s, "Action": sorted(listed(s["Action"]))} for s in services if s.get("Sid") != "EventBridgeDeadLetters"]
    assert logs == [
        {
            "Sid": "AllowCloudWatchLogsOfThisAccountAndRegion",
            "Effect": "Allow",
            "Principal": {
                "Service": {"Fn::Join": ["", ["logs.", {"Ref": "AWS::Region"}, ".", {"Ref": "AWS::URLSuffix"}]]}
            },
            "Action": sorted(
                ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
            ),
            "Resource": "*",
            "Condition": {
                "ArnLike": {
                    "kms:EncryptionContext:aws:logs:arn": {
                        "Fn::Join": [
                            "",
                            [
                                "arn:",
                                {"Ref": "AWS::Partition"},
                                ":logs:",
                                {"Ref": "AWS::Region"},
                                ":",
                                {"Ref": "AWS::AccountId"},
                                ":log-group:*",
                            ],
                        ]
                    }
                }
            },
        }
    ]


def key_actions(statements: list[dict[str, Any]], key: dict[str, Any]) -> set[str]:
    """The actions unconditional Allow statements grant on exactly this key (wildcards as written)."""
    return {
        action
        for statement in statements
        if statement["Effect"] == "Allow" and "Condition" not in statement and key in listed(statement["Resource"])
        for action in listed(statement["Action"])
    }


@pytest.mark.parametrize(("role_prefix", "needed"), sorted(PRINCIPALS.items()))
def test_each_principal_holds_what_it_needs_on_the_key(
    keyed_template: dict[str, Any], key_id: str, role_prefix: str, needed: tuple[str, ...]
) -> None:
    role_id, _ = only_resource(keyed_template, "AWS::IAM::Role", role_prefix)
    granted = key_actions(role_statements(keyed_template, role_id), key_arn(key_id))
    for action in needed:
        assert any(fnmatchcase(action, pattern) for pattern in granted), f"{role_id} lacks {action}: {granted}"


def test_eventbridge_may_use_the_key_for_the_rules_whose_dead_letter_queues_it_encrypts_only(
    keyed_template: dict[str, Any], key_id: str
) -> None:
    """Each rule whose target's DLQ the key encrypts (found by that relationship: the anchoring schedule's, the
    control-plane watch's), by the ARN its name gives, and no other rule of the account; no reference to a rule
    (a cycle: the key, the rule, its target's log group on the key)."""
    statements = keyed_template["Resources"][key_id]["Properties"]["KeyPolicy"]["Statement"]
    (statement,) = [s for s in statements if s.get("Sid") == "EventBridgeDeadLetters"]
    assert statement["Principal"] == {"Service": "events.amazonaws.com"}
    assert sorted(listed(statement["Action"])) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert set(statement["Condition"]) == {"StringEquals", "ArnEquals"}
    assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    (arns,) = statement["Condition"]["ArnEquals"].values()
    assert "Fn::GetAtt" not in json.dumps(arns)
    named = sorted(arn["Fn::Join"][1][-1].removeprefix(":rule/") for arn in arns)
    rules = resources_of_type(keyed_template, "AWS::Events::Rule")
    with_keyed_dead_letters = sorted(
        rule["Properties"]["Name"]
        for rule in rules.values()
        if any("DeadLetterConfig" in target for target in rule["Properties"]["Targets"])
    )
    assert named == with_keyed_dead_letters
    # the anchoring schedule, the WORKFLOW settle pass's, and the watch's rules
    watch = [logical for logical in rules if logical.startswith("OutboxControlPlane")]
    assert len(watch) >= 11
    assert len(named) == len(rules) == 2 + len(watch)


def test_a_producer_granted_emit_holds_no_wildcard_key_action(keyed_template: dict[str, Any], key_id: str) -> None:
    role_id, _ = only_resource(keyed_template, "AWS::IAM::Role", "Producer")
    granted = key_actions(role_statements(keyed_template, role_id), key_arn(key_id))
    assert granted == {"kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey"}


def test_cdk_nag_passes_and_only_cdks_wildcard_key_grants_are_acknowledged(keyed: Synthesized) -> None:
    report = json.loads((keyed.outdir / "validation-report.json").read_text())
    assert {plugin["pluginName"] for plugin in report["pluginReports"]} == {"AwsSolutions", "Serverless"}
    key_acknowledgements: dict[str, set[str]] = {}
    for plugin in report["pluginReports"]:
        assert plugin["conclusion"] == "success", plugin["pluginName"]
        assert plugin["violations"] == []
        for suppressed in plugin.get("suppressedViolations", []):
            if suppressed["ruleName"].startswith("AwsSolutions-IAM5[Action::kms:"):
                for construct in suppressed["violatingConstructs"]:
                    key_acknowledgements.setdefault(suppressed["ruleName"], set()).add(construct["constructPath"])
    assert key_acknowledgements == {
        f"AwsSolutions-IAM5[Action::{action}]": WILDCARD_KEY_GRANTS for action in encryption.CDK_KEY_WILDCARD_ACTIONS
    }


def test_checkov_finds_no_failed_check_and_skips_no_check_the_key_passes(keyed: Synthesized, tmp_path: Path) -> None:
    report = run_checkov(find_checkov(), [keyed.outdir / f"{STACK}.template.json"], tmp_path)
    assert failed_checks(report) == []
    assert report["summary"]["passed"] > 0
    assert applied_skips(report) == asked_skips(keyed)
    # With the key, the customer-key checks pass: skipped on the application's own table only, as it was made.
    customer_key_skips = {
        (resource, check_id) for _, resource, check_id, _ in asked_skips(keyed) if check_id in CUSTOMER_KEY_CHECKS
    }
    data_table, _ = only_resource(keyed.template(STACK), "AWS::DynamoDB::Table", "Data")
    assert customer_key_skips == {(f"AWS::DynamoDB::Table.{data_table}", "CKV_AWS_119")}


def test_an_imported_key_is_used_and_granted_and_the_synth_warns_that_its_policy_must_admit_logs(
    tmp_path: Path,
) -> None:
    arn = "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"
    _, stack = keyed_app(str(tmp_path), lambda stack: kms.Key.from_key_arn(stack, "Imported", arn))
    Annotations.from_stack(stack).has_warning("/Keyed/Outbox", Match.string_like_regexp("admit CloudWatch Logs"))
    template = Template.from_stack(stack).to_json()
    # The alarm topic's key, and no other: the imported key's policy is not the stack's to write.
    assert [logical_id[: len("OutboxAlarmsKey")] for logical_id in resources_of_type(template, "AWS::KMS::Key")] == [
        "OutboxAlarmsKey"
    ]
    for log_group in resources_of_type(template, "AWS::Logs::LogGroup").values():
        assert log_group["Properties"]["KmsKeyId"] == arn
    # Grants on an imported key go to the roles' policies, as for a key of the stack's.
    for role_prefix, needed in PRINCIPALS.items():
        role_id, _ = only_resource(template, "AWS::IAM::Role", role_prefix)
        granted = key_actions(role_statements(template, role_id), arn)
        assert all(any(fnmatchcase(a, pattern) for pattern in granted) for a in needed), role_id


def test_without_a_key_every_table_queue_and_log_group_keeps_its_aws_key_and_says_so_to_checkov(
    stack_template: dict[str, Any],
) -> None:
    """The example stack passes no key: nothing of the above, and each customer-key skip where it was."""
    expected = {
        "AWS::DynamoDB::Table": ("CKV_AWS_119", 4),
        "AWS::SQS::Queue": ("CKV_AWS_27", 12),  # the control-plane watch's and the settle pass's DLQs among them
        # the example's producer has one too, its workflow and the workflow's settle pass, and the function that
        # sets the lane DLQs' redrive allow policies
        "AWS::Logs::LogGroup": ("CKV_AWS_158", 13),
    }
    for resource_type, (check_id, count) in expected.items():
        resources = resources_of_type(stack_template, resource_type)
        assert len(resources) == count, resource_type
        for logical_id, resource in resources.items():
            properties = resource["Properties"]
            assert not {"KMSMasterKeyId", "KmsMasterKeyId", "KmsKeyId"} & set(properties), logical_id
            assert properties.get("SSESpecification", {"SSEEnabled": True}) == {"SSEEnabled": True}, logical_id
            skips = resource["Metadata"][checkov.METADATA_KEY]["skip"]
            assert next(s["comment"] for s in skips if s["id"] == check_id).endswith(
                f"{checkov.CUSTOMER_KEY_OPTION}."
            ), logical_id
    for queue in resources_of_type(stack_template, "AWS::SQS::Queue").values():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True
    # The alarm topic's key is the only one.
    assert [
        logical_id[: len("OutboxAlarmsKey")] for logical_id in resources_of_type(stack_template, "AWS::KMS::Key")
    ] == ["OutboxAlarmsKey"]
