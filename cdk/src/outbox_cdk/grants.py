"""Grants written by hand: the actions a role's code calls on a table's items or a queue's messages, each with
exactly what they need on the resource's customer-managed key, if it has one.

CDK's ``grant_read_write_data``, ``grant_read_data`` and ``grant_consume_messages`` grant more than this
package's code calls (Scan, BatchWriteItem, DescribeTable, GetQueueUrl, ChangeMessageVisibility...); the
constructs name their actions instead, next to the code that calls them, and the end-to-end test
``tests/e2e/test_least_privilege.py`` compares each role with the calls its code really makes. CDK's
``ITable.grant`` and ``IQueue.grant`` grant no key: these functions do, without wildcard key actions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aws_cdk import Stack, Token
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import IConstruct

# To read items of a table encrypted with a customer-managed key (CDK's KEY_READ_ACTIONS), and to write them
# too: CDK's key read and write actions without their two wildcards (kms:ReEncrypt*, and kms:GenerateDataKey*
# narrowed to kms:GenerateDataKey), so that no hand-written grant gives cdk-nag's IAM5 anything to report.
ITEM_READ_KEY_ACTIONS: Final = ("kms:Decrypt", "kms:DescribeKey")
ITEM_KEY_ACTIONS: Final = ("kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey")
ITEM_READ_ACTIONS: Final = frozenset({"dynamodb:GetItem", "dynamodb:Query"})

# On an SSE-KMS queue a receive decrypts (kms:Decrypt) and a send makes a data key as well
# (kms:GenerateDataKey): SQS developer guide, "Key management", the producer and consumer permissions.
# Reading a queue's attributes, or a move task's state, needs no key.
QUEUE_RECEIVE_ACTIONS: Final = frozenset({"sqs:ReceiveMessage", "sqs:StartMessageMoveTask"})
QUEUE_SEND_ACTIONS: Final = frozenset({"sqs:SendMessage"})
# A pipe's state (CurrentState): what the operator endpoint and `outbox status` report, and what each anchoring
# pass publishes (outbox.audit.liveness).
PIPE_STATUS_ACTIONS: Final = ("pipes:DescribePipe",)


def leading_keys(*patterns: str) -> dict[str, dict[str, Any]]:
    """The condition that a request touches only partitions matching ``patterns`` (``dynamodb:LeadingKeys``)."""
    return {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": list(patterns)},
        "Null": {"dynamodb:LeadingKeys": "false"},
    }


def grant_items(
    table: dynamodb.ITable,
    grantee: iam.IGrantable,
    actions: Iterable[str],
    *,
    conditions: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """``actions`` on the items of ``table`` (where ``conditions`` hold: partitions by ``dynamodb:LeadingKeys``,
    say), and on its key the read or the read-write key actions."""
    actions = list(actions)
    if conditions is None:
        iam.Grant.add_to_principal(grantee=grantee, actions=actions, resource_arns=[table.table_arn])
    else:
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(actions=actions, resources=[table.table_arn], conditions=dict(conditions))
        )
    if table.encryption_key is not None:
        reads_only = set(actions) <= ITEM_READ_ACTIONS
        table.encryption_key.grant(grantee, *(ITEM_READ_KEY_ACTIONS if reads_only else ITEM_KEY_ACTIONS))


def grant_messages(queue: sqs.IQueue, grantee: iam.IGrantable, actions: Iterable[str]) -> None:
    """``actions`` on ``queue``, and on its key what a receive or a send of them needs."""
    actions = list(actions)
    queue.grant(grantee, *actions)
    key = queue.encryption_master_key
    if key is None:
        return
    if QUEUE_SEND_ACTIONS & set(actions):
        key.grant(grantee, "kms:Decrypt", "kms:GenerateDataKey")
    elif QUEUE_RECEIVE_ACTIONS & set(actions):
        key.grant_decrypt(grantee)


def grant_pipe_status(grantee: iam.IGrantable, pipe_arns: Iterable[str]) -> None:
    """DescribePipe on exactly these pipes (a pipe has no key to grant: its state is not encrypted)."""
    iam.Grant.add_to_principal(grantee=grantee, actions=list(PIPE_STATUS_ACTIONS), resource_arns=list(pipe_arns))


# What IAM's ARN condition operators match as patterns, ArnEquals and ArnNotEquals as much as ArnLike: an admitted
# ARN with one of them exempts every principal it matches from a Deny's ArnNotEquals.
ARN_WILDCARDS: Final = ("*", "?")


def one_principal_arn(scope: IConstruct, arn: str, what: str, deny: str) -> str:
    """``arn``, checked to name one role or user: one with a wildcard (``role/*``) is refused at synth, saying
    ``what`` was called, which ``deny`` it would have lifted, and what to pass instead. Of an ARN known only at
    deploy time (a parameter's, an import's) only the literal parts can be read here."""
    literal = json.dumps(Stack.of(scope).resolve(arn)) if Token.is_unresolved(arn) else arn
    if any(wildcard in literal for wildcard in ARN_WILDCARDS):
        raise ValueError(
            f"{what}: {literal} has a wildcard (* or ?), which IAM's ArnNotEquals matches as a pattern: it would "
            f"exempt every principal it matches from {deny}. Name each role or user by its exact ARN, one call "
            "per role (iam.Role.from_role_arn(scope, id, 'arn:aws:iam::123456789012:role/Name'))"
        )
    return arn


# An IAM tag key (of a user or role, or a session tag): letters, digits, spaces and _.:/=+-@, up to 128.
TAG_KEY: Final = re.compile(r"[\w.:/=+@ -]{1,128}")


@dataclass(frozen=True)
class OperatorTrust:
    """What every assumption of the operator and runbook roles must show, besides coming from ``operators``.

    require_mfa
        The caller signed in with MFA (``aws:MultiFactorAuthPresent`` true; absent counts as false). Fits IAM
        users who assume with ``--serial-number``; a session of IAM Identity Center or of another role does
        not carry the key, so for those use ``principal_tag``.
    principal_tag
        ``(key, value)``: the calling principal (its user or role, or a session tag) carries this tag
        (``aws:PrincipalTag/<key>``), say ``("team", "oncall")``. Whoever may tag principals may then grant
        the roles: keep ``iam:TagRole``/``iam:TagUser`` on that key to the administrators.
    """

    require_mfa: bool = False
    principal_tag: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if self.principal_tag is not None:
            key, value = self.principal_tag
            if not TAG_KEY.fullmatch(key) or not value:
                raise ValueError(
                    f"OperatorTrust principal_tag must be (key, value) with an IAM tag key and a value, like "
                    f"('team', 'oncall'); got {self.principal_tag!r}"
                )

    def conditions(self) -> dict[str, dict[str, str]]:
        """The trust statement's conditions (all must hold)."""
        conditions: dict[str, dict[str, str]] = {}
        if self.require_mfa:
            conditions["Bool"] = {"aws:MultiFactorAuthPresent": "true"}
        if self.principal_tag is not None:
            key, value = self.principal_tag
            conditions["StringEquals"] = {f"aws:PrincipalTag/{key}": value}
        return conditions


def trusting(operators: Sequence[iam.IPrincipal], trust: OperatorTrust | None = None) -> iam.IPrincipal:
    """The principal a role for people trusts: the one operator given, or all of them, each under ``trust``'s
    conditions (one trust statement per operator, every one with all of them)."""
    conditions = trust.conditions() if trust is not None else {}
    if conditions:
        operators = [iam.PrincipalWithConditions(operator, conditions) for operator in operators]
    return operators[0] if len(operators) == 1 else iam.CompositePrincipal(*operators)
