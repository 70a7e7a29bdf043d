"""Each lane's DLQ may be named as a dead-letter queue by its own source queue only (``byQueue``), set by a custom
resource once both queues exist, and no queue was renamed or replaced for it (R10.9).

The policy cannot be in the DLQ's template (the source queue's redrive policy names the DLQ's ARN: a cycle), so it
is read from what the custom resource will send: its SetQueueAttributes call, with the template's references put in
as placeholders and the JSON read back."""

from __future__ import annotations

import json
from typing import Any

from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.template_queries import allowed_pairs, arn_of, listed, role_statements

# The one action the custom resource's role is allowed, on the lane DLQs only.
SET_ATTRIBUTES_ACTION = "sqs:SetQueueAttributes"
# Every queue of the stack, by the logical id it had before the lane DLQs' byQueue: none may be renamed (a new
# logical id, or a QueueName, replaces the queue and deletes its messages).
QUEUE_IDS = {
    "OutboxAuditorAnchoringDeadLettersQueueBDBE8C6D",
    "OutboxAuditorFindingsDeadLettersQueueE4B982BC",
    "OutboxAuditorFindingsQueueE340A561",
    "OutboxAuditorPipeDeadLettersQueue7C565217",
    "OutboxControlPlaneDeadLettersQueue274BBD49",
    "OutboxDurableDeadLettersQueue7136BE10",
    "OutboxDurableQueueECEA96BD",
    "OutboxRecordChangePipeDeadLettersQueue0EB01B35",
    "OutboxRecordChangesDeadLettersQueue798E1161",
    "OutboxRecordChangesQueue759AE215",
    "OutboxRelayDeadLettersQueue4DFD12FC",
    # New with the example's WORKFLOW subscription (its settle pass's); the anchoring's kept its id through the
    # scheduled pass both are now built by (outbox_cdk.scheduled_pass)
    "OutboxWorkflowsSettlerDeadLettersQueueEBDF4A14",
}
# The FIFO ones among them, as they were: FifoQueue cannot change without a replacement either.
FIFO_QUEUE_IDS = {"OutboxDurableDeadLettersQueue7136BE10", "OutboxDurableQueueECEA96BD"}


def placeholder(value: Any) -> str:
    """A Ref or Fn::GetAtt of the template as text: ``<Ref X>``, ``<X.Arn>``."""
    if "Ref" in value:
        return f"<Ref {value['Ref']}>"
    logical_id, attribute = value["Fn::GetAtt"]
    return f"<{logical_id}.{attribute}>"


def sdk_call(value: Any) -> dict[str, Any]:
    """An AwsCustomResource's Create or Update property, its references as placeholders, read back as JSON."""
    if isinstance(value, str):
        text = value
    else:
        separator, parts = value["Fn::Join"]
        # A placeholder has no quote or backslash, so it reads back inside the policy's JSON string as well.
        text = separator.join(part if isinstance(part, str) else placeholder(part) for part in parts)
    call: dict[str, Any] = json.loads(text)
    return call


def lane_dead_letters(stack_template: dict[str, Any]) -> dict[str, str]:
    """Each DLQ a queue's redrive policy names: {DLQ logical id: its source queue's logical id}."""
    found = {}
    for logical_id, queue in resources_of_type(stack_template, "AWS::SQS::Queue").items():
        redrive = queue["Properties"].get("RedrivePolicy")
        if redrive:
            dead_letter_id, attribute = redrive["deadLetterTargetArn"]["Fn::GetAtt"]
            assert attribute == "Arn"
            found[dead_letter_id] = logical_id
    return found


def writer_function(stack_template: dict[str, Any]) -> str:
    """The function every Custom::AWS resource of the stack is run by (CDK makes one per stack)."""
    tokens = {
        json.dumps(resource["Properties"]["ServiceToken"], sort_keys=True)
        for resource in resources_of_type(stack_template, "Custom::AWS").values()
    }
    [token] = tokens
    logical_id, attribute = json.loads(token)["Fn::GetAtt"]
    assert attribute == "Arn"
    return str(logical_id)


def test_each_lane_dead_letter_queue_ends_with_by_queue_naming_its_own_source_queue_alone(
    stack_template: dict[str, Any],
) -> None:
    lanes = lane_dead_letters(stack_template)
    assert len(lanes) == 3, lanes  # the durable, record-change and tamper queues
    set_policies: dict[str, dict[str, Any]] = {}
    for logical_id, resource in resources_of_type(stack_template, "Custom::AWS").items():
        properties = resource["Properties"]
        create, update = sdk_call(properties["Create"]), sdk_call(properties["Update"])
        assert create == update, logical_id  # a changed queue gets the policy again
        assert "Delete" not in properties, logical_id  # nothing is put back: byQueue stays right (redrive_allow)
        assert properties["InstallLatestAwsSdk"] is False  # no download from npm during a deploy
        assert (create["service"], create["action"]) == ("SQS", "setQueueAttributes")
        parameters = create["parameters"]
        assert set(parameters["Attributes"]) == {"RedriveAllowPolicy"}, logical_id
        queue_url = parameters["QueueUrl"]
        assert queue_url.startswith("<Ref "), queue_url
        assert queue_url.endswith(">"), queue_url
        dead_letter_id = queue_url.removeprefix("<Ref ").removesuffix(">")
        assert dead_letter_id not in set_policies, dead_letter_id
        set_policies[dead_letter_id] = json.loads(parameters["Attributes"]["RedriveAllowPolicy"])
    assert set_policies == {
        dead_letter_id: {"redrivePermission": "byQueue", "sourceQueueArns": [f"<{source_id}.Arn>"]}
        for dead_letter_id, source_id in lanes.items()
    }


def test_no_lane_dead_letter_queue_declares_a_redrive_allow_policy_cloudformation_would_set_back(
    stack_template: dict[str, Any],
) -> None:
    # Declared on the DLQ, an update of the DLQ's own properties could set it again over the custom resource's.
    # The DLQs no queue names keep denyAll there (test_dead_letter_senders).
    for dead_letter_id in lane_dead_letters(stack_template):
        assert "RedriveAllowPolicy" not in stack_template["Resources"][dead_letter_id]["Properties"], dead_letter_id


def test_the_custom_resource_s_role_may_set_attributes_on_the_lane_dead_letter_queues_only(
    stack_template: dict[str, Any],
) -> None:
    function = stack_template["Resources"][writer_function(stack_template)]
    role_id, attribute = function["Properties"]["Role"]["Fn::GetAtt"]
    assert attribute == "Arn"
    role = stack_template["Resources"][role_id]["Properties"]
    assert "ManagedPolicyArns" not in role  # not AWSLambdaBasicExecutionRole: it writes every log group
    assert "Policies" not in role
    log_group = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    statements = role_statements(stack_template, role_id)
    assert all("*" not in json.dumps(listed(statement["Resource"])) for statement in statements), statements
    assert allowed_pairs(statements) == {
        *((SET_ATTRIBUTES_ACTION, arn_of(dead_letter_id)) for dead_letter_id in lane_dead_letters(stack_template)),
        ("logs:CreateLogStream", arn_of(log_group)),
        ("logs:PutLogEvents", arn_of(log_group)),
    }
    # And no other function runs as this role.
    users = [
        logical_id
        for logical_id, resource in resources_of_type(stack_template, "AWS::Lambda::Function").items()
        if resource["Properties"]["Role"] == {"Fn::GetAtt": [role_id, "Arn"]}
    ]
    assert users == [writer_function(stack_template)]


def test_each_custom_resource_runs_after_its_policy_is_attached(stack_template: dict[str, Any]) -> None:
    policies = {
        logical_id
        for logical_id, policy in resources_of_type(stack_template, "AWS::IAM::Policy").items()
        if any(
            SET_ATTRIBUTES_ACTION in listed(s["Action"]) for s in policy["Properties"]["PolicyDocument"]["Statement"]
        )
    }
    waits = [
        set(resource.get("DependsOn", [])) & policies
        for resource in resources_of_type(stack_template, "Custom::AWS").values()
    ]
    assert sorted(len(found) for found in waits) == [1, 1, 1]
    assert set().union(*waits) == policies


def test_no_queue_is_renamed_or_replaced(stack_template: dict[str, Any]) -> None:
    # What replaces a queue when it changes, read from CloudFormation's resource schema (the copy cfn-lint ships).
    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", "AWS::SQS::Queue").schema
    create_only = {path.removeprefix("/properties/") for path in schema["createOnlyProperties"]}
    assert create_only == {"FifoQueue", "QueueName"}
    queues = resources_of_type(stack_template, "AWS::SQS::Queue")
    assert set(queues) == QUEUE_IDS
    assert {
        logical_id: {name: queue["Properties"][name] for name in create_only if name in queue["Properties"]}
        for logical_id, queue in queues.items()
    } == {logical_id: ({"FifoQueue": True} if logical_id in FIFO_QUEUE_IDS else {}) for logical_id in QUEUE_IDS}


def test_a_call_with_references_reads_back_as_json_with_placeholders() -> None:
    call = {"Fn::Join": ["", ['{"a":"', {"Ref": "X"}, '","b":"', {"Fn::GetAtt": ["Y", "Arn"]}, '"}']]}
    assert sdk_call(call) == {"a": "<Ref X>", "b": "<Y.Arn>"}
