"""The events table: the tenant hash chains, written only through the engine's emit()."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from outbox_cdk.encryption import acknowledge_key_wildcards
from outbox_cdk.grants import grant_items, trusting
from outbox_cdk.table_defaults import protected_table

# Key layout shared with the engine (outbox.keys): the partition key of every
# event row is TENANT#<tenant>#EVENT, of every chain head TENANT#<tenant>#HEAD.
EVENT_ROW_PARTITION_PATTERN = "TENANT#*#EVENT"

# Every API that can change or remove an existing event row. PutItem is not here: appending is how
# emit() works, and IAM cannot tell an append from an overwrite (see README, "Append-only by policy").
EVENT_ROW_MUTATIONS = [
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:PartiQLInsert",
    "dynamodb:PartiQLUpdate",
    "dynamodb:PartiQLDelete",
]

# What emit() calls: a consistent GetItem of the chain head, then one TransactWriteItems, authorised per item:
# PutItem for the event row (and the tenant's index row, with its first event) and the head's first write,
# UpdateItem for the head after that. It checks no item of the table on its own (no ConditionCheckItem).
EMIT_ACTIONS = [
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
]
# What reading the log calls: the head (GetItem), a tenant's rows in order and the tenant index (Query, page by
# page): verify_chain, status, replay and reconcile.
LOG_READ_ACTIONS = ["dynamodb:GetItem", "dynamodb:Query"]
# What emit() is granted on the table's customer-managed key, when it has one: the key actions CDK's own
# table grants use for reads and writes (aws_dynamodb KEY_READ_ACTIONS, KEY_WRITE_ACTIONS) without the two
# wildcards (kms:ReEncrypt*, and kms:GenerateDataKey* narrowed to kms:GenerateDataKey), so the policy of a
# producer of yours gives cdk-nag's IAM5 nothing to report.
EMIT_KEY_ACTIONS = [
    "kms:Decrypt",
    "kms:DescribeKey",
    "kms:Encrypt",
    "kms:GenerateDataKey",
]


class EventsTable(Construct):
    """The append-only events table with its stream, and the grants that keep it append-only.

    Every grant except ``grant_repair`` carries an explicit Deny on mutating event rows, so no role made
    through this construct can update or delete an event row; only the operator role may. With
    ``encryption_key`` (a customer-managed key for the table and its stream), every grant grants the key too.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        operators: Sequence[iam.IPrincipal],
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.table = protected_table(
            self, "Table", stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES, encryption_key=encryption_key
        )
        self.operator_role = iam.Role(
            self,
            "OperatorRole",
            # Only the principals the pipeline was given: the whole account only if it was given that.
            assumed_by=trusting(operators),
            description="The only role that may repair (update, delete, overwrite) event rows. Assume it "
            "deliberately, for a documented repair; every other role is denied.",
        )
        self.grant_repair(self.operator_role)
        if encryption_key is not None:
            acknowledge_key_wildcards(self.operator_role, "grant_read_write_data on the events table")

    @property
    def stream_arn(self) -> str:
        arn = self.table.table_stream_arn
        assert arn is not None, "the events table is created with a stream"
        return arn

    def grant_emit(self, grantee: iam.IGrantable) -> None:
        """Least privilege for code that calls emit(): read the head, write one transaction."""
        iam.Grant.add_to_principal(grantee=grantee, actions=EMIT_ACTIONS, resource_arns=[self.table.table_arn])
        # Written by hand, so CDK grants no key with it: the key grant is here.
        if self.table.encryption_key is not None:
            self.table.encryption_key.grant(grantee, *EMIT_KEY_ACTIONS)
        self._deny_event_row_mutation(grantee)

    def grant_read(self, grantee: iam.IGrantable) -> None:
        """Read the log (verify_chain, replay, reconcile); never change it."""
        grant_items(self.table, grantee, LOG_READ_ACTIONS)  # and kms:Decrypt, kms:DescribeKey on its key, if any
        self._deny_event_row_mutation(grantee)

    def grant_repair(self, grantee: iam.IGrantable) -> None:
        """Full item access, for the operator role only. No deny: this is the one exempt role."""
        self.table.grant_read_write_data(grantee)  # and the table's key, if any (CDK's key read and write actions)

    def _deny_event_row_mutation(self, grantee: iam.IGrantable) -> None:
        # ForAnyValue, not the ForAllValues that AWS prescribes for Allow statements: in a Deny we want
        # "any key in the request is an event row", so a BatchWriteItem that mixes an event row with
        # other rows is denied too. ForAnyValue is false when the key is absent (Scan, DescribeTable),
        # so the Null guard that ForAllValues needs is kept only to make the intent explicit.
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                sid="DenyEventRowMutation",
                effect=iam.Effect.DENY,
                actions=EVENT_ROW_MUTATIONS,
                resources=[self.table.table_arn],
                conditions={
                    "ForAnyValue:StringLike": {"dynamodb:LeadingKeys": [EVENT_ROW_PARTITION_PATTERN]},
                    "Null": {"dynamodb:LeadingKeys": "false"},
                },
            )
        )
