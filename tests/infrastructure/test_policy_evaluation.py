"""The policy evaluator's own rules, on hand-written statements: the parts added for the dead-letter queues
(``...IfExists`` operators, service principals, ``aws:PrincipalIsAWSService``) decide as docs/aws-behaviour.md
R10.2 and R10.7 say, and what is still not modelled is refused."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infrastructure.policy_evaluation import (
    Decision,
    NotModelledError,
    Request,
    condition_holds,
    decide,
    resolve,
)

QUEUE = "arn:aws:sqs:us-east-1:123456789012:dlq"
ROLE = "arn:aws:iam::123456789012:role/writer"
OTHER = "arn:aws:iam::123456789012:role/admin"
RULE = "arn:aws:events:us-east-1:123456789012:rule/schedule"
EVENTS = "events.amazonaws.com"
ALLOW_ALL: Any = [{"Effect": "Allow", "Action": "*", "Resource": "*"}]


@pytest.mark.parametrize(
    ("keys", "holds"),
    [({}, True), ({"aws:PrincipalIsAWSService": ["false"]}, True), ({"aws:PrincipalIsAWSService": ["true"]}, False)],
    ids=["absent", "false", "true"],
)
def test_bool_if_exists_is_true_on_an_absent_key_else_bool_decides(keys: dict[str, list[str]], holds: bool) -> None:
    assert condition_holds("BoolIfExists", "aws:PrincipalIsAWSService", "false", keys) is holds


@pytest.mark.parametrize(
    ("keys", "holds"), [({}, True), ({"aws:SourceArn": [RULE]}, False), ({"aws:SourceArn": [QUEUE]}, True)]
)
def test_a_negated_arn_operator_if_exists(keys: dict[str, list[str]], holds: bool) -> None:
    assert condition_holds("ArnNotEqualsIfExists", "aws:SourceArn", [RULE], keys) is holds


@pytest.mark.parametrize("operator", ["NullIfExists", "ForAnyValue:StringLikeIfExists"])
def test_what_is_still_not_modelled_is_refused(operator: str) -> None:
    with pytest.raises(NotModelledError):
        condition_holds(operator, "aws:PrincipalArn", "x", {})


def test_a_signed_request_says_whether_a_service_made_it_and_an_anonymous_one_does_not() -> None:
    assert Request("sqs:SendMessage", QUEUE, ROLE).keys()["aws:PrincipalIsAWSService"] == ["false"]
    service = Request("sqs:SendMessage", QUEUE, None, service=EVENTS).keys()
    assert service["aws:PrincipalIsAWSService"] == ["true"]
    assert service["aws:PrincipalServiceName"] == [EVENTS]
    assert "aws:PrincipalArn" not in service
    anonymous = Request("sqs:SendMessage", QUEUE, None).keys()
    assert "aws:PrincipalIsAWSService" not in anonymous


def test_a_service_principal_matches_its_service_and_a_wildcard_but_no_role_arn() -> None:
    def allowed(principal: Any, request: Request) -> Decision:
        statement = {"Effect": "Allow", "Principal": principal, "Action": "sqs:SendMessage", "Resource": QUEUE}
        return decide(request, [], [statement])

    from_events = Request("sqs:SendMessage", QUEUE, ROLE, service=EVENTS)  # even with a PrincipalArn in it
    assert allowed({"Service": EVENTS}, from_events) is Decision.ALLOWED
    assert allowed({"Service": ["sns.amazonaws.com", EVENTS]}, from_events) is Decision.ALLOWED
    assert allowed({"AWS": "*"}, from_events) is Decision.ALLOWED
    assert allowed("*", from_events) is Decision.ALLOWED
    assert allowed({"AWS": ROLE}, from_events) is Decision.IMPLICIT_DENY
    assert allowed({"Service": EVENTS}, Request("sqs:SendMessage", QUEUE, ROLE)) is Decision.IMPLICIT_DENY
    with pytest.raises(NotModelledError):
        allowed({"Federated": "cognito-identity.amazonaws.com"}, from_events)


def test_a_deny_that_spares_services_binds_every_iam_principal_and_anonymous_but_no_service() -> None:
    # AWS's own data-perimeter shape (R10.7): Principal "*", BoolIfExists aws:PrincipalIsAWSService false.
    deny = {
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "sqs:SendMessage",
        "Resource": QUEUE,
        "Condition": {
            "BoolIfExists": {"aws:PrincipalIsAWSService": "false"},
            "ArnNotEquals": {"aws:PrincipalArn": [ROLE]},
        },
    }
    allow_events = {"Effect": "Allow", "Principal": {"Service": EVENTS}, "Action": "sqs:SendMessage", "Resource": QUEUE}

    def send(request: Request) -> Decision:
        return decide(request, ALLOW_ALL if request.service is None else [], [deny, allow_events])

    assert send(Request("sqs:SendMessage", QUEUE, ROLE)) is Decision.ALLOWED
    assert send(Request("sqs:SendMessage", QUEUE, OTHER)) is Decision.EXPLICIT_DENY
    assert send(Request("sqs:SendMessage", QUEUE, None)) is Decision.EXPLICIT_DENY  # anonymous
    assert send(Request("sqs:SendMessage", QUEUE, None, service=EVENTS)) is Decision.ALLOWED
    assert send(Request("sqs:SendMessage", QUEUE, OTHER, service=EVENTS)) is Decision.ALLOWED
    assert send(Request("sqs:SendMessage", QUEUE, None, service="sns.amazonaws.com")) is Decision.IMPLICIT_DENY


def test_a_join_of_references_resolves_to_their_arns_joined_and_anything_else_in_it_is_refused() -> None:
    arns = {"Fn": "arn:aws:lambda:us-east-1:1:function:fn"}
    joined = {"Fn::Join": ["", [{"Fn::GetAtt": ["Fn", "Arn"]}, ":*"]]}
    assert resolve(joined, arns) == "arn:aws:lambda:us-east-1:1:function:fn:*"
    with pytest.raises(NotModelledError, match="Fn::Join"):
        resolve({"Fn::Join": ["", [{"Fn::GetAtt": ["Fn", "Arn"]}, ["a list"]]]}, arns)
    with pytest.raises(NotModelledError, match="Fn::Select"):
        resolve({"Fn::Join": ["", [{"Fn::Select": [0, ["x"]]}]]}, arns)
