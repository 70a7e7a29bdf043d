"""The events table: the tenant hash chains, written only through the engine's emit()."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from outbox_cdk.encryption import acknowledge_key_wildcards
from outbox_cdk.grants import OperatorTrust, grant_items, trusting
from outbox_cdk.table_defaults import protected_table

# Key layout shared with the engine (outbox.keys): the partition key of every
# event row is TENANT#<tenant>#EVENT, of every chain head TENANT#<tenant>#HEAD.
EVENT_ROW_PARTITION_PATTERN = "TENANT#*#EVENT"

# Every API that can change or remove an existing event row. PutItem is not here: appending is how
# emit() works, and IAM cannot tell an append from an overwrite (docs/concepts.md, "Append-only, and what
# happens when it is not").
EVENT_ROW_MUTATIONS = [
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:PartiQLInsert",
    "dynamodb:PartiQLUpdate",
    "dynamodb:PartiQLDelete",
]

# "Any key of the request is an event row". ForAnyValue, not the ForAllValues that AWS prescribes for Allow
# statements: in a Deny we want a BatchWriteItem that mixes an event row with other rows denied too.
# ForAnyValue is false when the key is absent (Scan, DescribeTable, UpdateTable), so the Null guard that
# ForAllValues needs is kept only to make the intent explicit.
EVENT_ROW_CONDITIONS: Final = {
    "ForAnyValue:StringLike": {"dynamodb:LeadingKeys": [EVENT_ROW_PARTITION_PATTERN]},
    "Null": {"dynamodb:LeadingKeys": "false"},
}
# The table's resource policy statement that refuses those mutations to every principal but the operator role.
RESOURCE_DENY_SID: Final = "DenyEventRowMutationToAllButTheOperatorRole"

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
# What the durable consumer adds to emit's: each batch's event rows, read at once to confirm its messages.
CONFIRM_ACTIONS = ["dynamodb:BatchGetItem"]
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

    Every grant except ``grant_repair`` carries an explicit Deny on mutating event rows, and the table's
    resource policy carries the same Deny for every principal whose ARN is not the operator role's, so no
    principal of the account but the operator role can update or delete an event row. With
    ``encryption_key`` (a customer-managed key for the table and its stream), every grant grants the key too.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        operators: Sequence[iam.IPrincipal],
        operator_trust: OperatorTrust | None = None,
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
            assumed_by=trusting(operators, operator_trust),
            description="The only role that may repair (update, delete, overwrite) event rows. Assume it "
            "deliberately, for a documented repair; every other role is denied.",
        )
        self.grant_repair(self.operator_role)
        self._deny_event_row_mutation_to_all_but_the_operator_role()
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

    def grant_confirm(self, grantee: iam.IGrantable) -> None:
        """Read a batch's event rows at once (BatchGetItem), as the durable consumer confirms each message
        against the log; its key's read actions come with the emit grant it also holds."""
        iam.Grant.add_to_principal(grantee=grantee, actions=CONFIRM_ACTIONS, resource_arns=[self.table.table_arn])

    def grant_read(self, grantee: iam.IGrantable) -> None:
        """Read the log (verify_chain, replay, reconcile); never change it."""
        grant_items(self.table, grantee, LOG_READ_ACTIONS)  # and kms:Decrypt, kms:DescribeKey on its key, if any
        self._deny_event_row_mutation(grantee)

    def grant_repair(self, grantee: iam.IGrantable) -> None:
        """Full item access, for the operator role only. No deny: this is the one exempt role."""
        self.table.grant_read_write_data(grantee)  # and the table's key, if any (CDK's key read and write actions)

    def _deny_event_row_mutation(self, grantee: iam.IGrantable) -> None:
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                sid="DenyEventRowMutation",
                effect=iam.Effect.DENY,
                actions=EVENT_ROW_MUTATIONS,
                resources=[self.table.table_arn],
                conditions=EVENT_ROW_CONDITIONS,
            )
        )

    def _deny_event_row_mutation_to_all_but_the_operator_role(self) -> None:
        """The same Deny in the table's resource policy, so that it binds every principal, admins, CI and
        the root user included, and not only the roles granted through this construct (R10.3).

        - ``Resource: "*"``, the table itself: a resource policy cannot name the ARN of the table it is
          created with (CloudFormation would have to know the ARN first; R10.6), and CDK writes ``*`` for it.
        - Only item mutations of event rows: no table action (``UpdateTable``, ``PutResourcePolicy``,
          ``DeleteResourcePolicy``, ``UpdateTimeToLive``, tags, backups), so CloudFormation can still update
          the table and this policy, and neither can lock the other out. DynamoDB's own work (a TTL delete,
          run as the service) is no principal's request; the events table has no TTL anyway.
        - ``PutItem`` is not denied: IAM cannot tell an append from an overwrite, and every emitter appends
          with it; an overwrite by a role that may emit is not prevented here (see tamper evidence).
        - A principal allowed ``dynamodb:PutResourcePolicy`` (an administrator) can lift it, which CloudTrail
          records; denying that too would deny it to CloudFormation's role.
        """
        self.table.add_to_resource_policy(
            iam.PolicyStatement(
                sid=RESOURCE_DENY_SID,
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=EVENT_ROW_MUTATIONS,
                resources=["*"],
                conditions={
                    **EVENT_ROW_CONDITIONS,
                    "ArnNotEquals": {"aws:PrincipalArn": [self.operator_role.role_arn]},
                },
            )
        )
