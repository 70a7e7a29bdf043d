"""The events table: the tenant hash chains, written only through the engine's emit()."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from aws_cdk import Stack, Token
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from outbox_cdk.encryption import acknowledge_key_wildcards
from outbox_cdk.grants import OperatorTrust, grant_items, one_principal_arn, trusting
from outbox_cdk.table_defaults import protected_table

# Key layout shared with the engine (outbox.keys): the partition key of every
# event row is TENANT#<tenant>#EVENT, of every chain head TENANT#<tenant>#HEAD.
EVENT_ROW_PARTITION_PATTERN = "TENANT#*#EVENT"

# Every API that can change or remove an existing event row. PutItem is not here: appending is how
# emit() works, and IAM cannot tell an append from an overwrite (docs/concepts.md, "Append-only, and what
# happens when it is not"); it has its own Deny, which exempts the emitters too (CHAIN_ROW_WRITES).
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
# The rows emit() writes beside the events and never removes: each tenant's chain head (TENANT#<tenant>#HEAD, put
# with its first event, updated with every later one) and its tenant index row (TENANTS#<shard>, put once, with its
# first event), which the hourly pass, status and verify-chain --all enumerate: a deleted index row drops its
# tenant from every check. Guarded as event rows are (``CHAIN_ROW_CONDITIONS``).
HEAD_PARTITION_PATTERN: Final = "TENANT#*#HEAD"
TENANT_INDEX_PARTITION_PATTERN: Final = "TENANTS#*"
CHAIN_ROW_PARTITION_PATTERNS: Final = (
    EVENT_ROW_PARTITION_PATTERN,
    HEAD_PARTITION_PATTERN,
    TENANT_INDEX_PARTITION_PATTERN,
)
# "Any key of the request is an event row, a head or an index row".
CHAIN_ROW_CONDITIONS: Final = {
    "ForAnyValue:StringLike": {"dynamodb:LeadingKeys": list(CHAIN_ROW_PARTITION_PATTERNS)},
    "Null": {"dynamodb:LeadingKeys": "false"},
}
# Writing a whole row of the chain, or moving a head: what emit()'s transaction does (an event row's append, a head
# put or updated, an index row put), and an overwrite, which IAM cannot tell apart. The resource policy refuses it
# to every principal but the operator role and the roles granted ``grant_emit`` (an UpdateItem of an event row is
# refused to the emitters too, by the mutation Deny).
CHAIN_ROW_WRITES: Final = ("dynamodb:PutItem", "dynamodb:UpdateItem")
PUT_DENY_SID: Final = "DenyChainRowWritesToAllButTheOperatorRoleAndTheEmitters"
# Removing a head or an index row, or writing one otherwise than emit() does: to every principal but the operator
# role. (An UpdateItem of an index row is refused to all but the operator role and the emitters, above.)
CHAIN_ROW_REMOVALS: Final = (
    "dynamodb:BatchWriteItem",
    "dynamodb:DeleteItem",
    "dynamodb:PartiQLDelete",
    "dynamodb:PartiQLInsert",
    "dynamodb:PartiQLUpdate",
)
REMOVAL_DENY_SID: Final = "DenyHeadAndIndexRowRemovalToAllButTheOperatorRole"
# Every request over plain HTTP, refused (DynamoDB's endpoints take both): what every queue's enforce_ssl does.
TLS_DENY_SID: Final = "DenyRequestsWithoutTls"
# As many emitters as keep the resource policy under DynamoDB's 20 KB whatever their ARNs (IAM allows a role
# ARN of about 600 characters; tests/infrastructure/test_events_table_policy.py measures it). Producers can
# share a role.
MAX_EMITTERS: Final = 25

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
    principal of the account but the operator role can update or delete an event row. A second statement of
    that policy refuses ``PutItem`` and ``UpdateItem`` on event rows, chain heads and tenant index rows to every
    principal but the operator role and the roles ``grant_emit`` admitted, so an administrator or a CI role
    cannot overwrite one either; a third refuses every request without TLS; a fourth refuses deleting a head or
    an index row to all but the operator role. With ``encryption_key`` (a customer-managed key for the table and
    its stream), every grant grants the key too.
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
        self._emitters: list[str] = []
        self._emitter_grantees: list[iam.IGrantable] = []
        self._emitter_listeners: list[Callable[[iam.IGrantable], None]] = []
        self._put_deny = self._deny_event_row_put_to_all_but_the_emitters()
        self._deny_requests_without_tls()
        self._deny_head_and_index_row_removal_to_all_but_the_operator_role()
        if encryption_key is not None:
            acknowledge_key_wildcards(self.operator_role, "grant_read_write_data on the events table")

    @property
    def stream_arn(self) -> str:
        arn = self.table.table_stream_arn
        assert arn is not None, "the events table is created with a stream"
        return arn

    def grant_emit(self, grantee: iam.IGrantable) -> None:
        """Least privilege for code that calls emit(): read the head, write one transaction. The grantee's role
        (or user) is admitted by the resource policy's PutItem Deny, which refuses everyone else."""
        if self._admit_emitter(grantee):
            self._emitter_grantees.append(grantee)
            for listener in self._emitter_listeners:
                listener(grantee)
        iam.Grant.add_to_principal(grantee=grantee, actions=EMIT_ACTIONS, resource_arns=[self.table.table_arn])
        # Written by hand, so CDK grants no key with it: the key grant is here.
        if self.table.encryption_key is not None:
            self.table.encryption_key.grant(grantee, *EMIT_KEY_ACTIONS)
        self._deny_event_row_mutation(grantee)

    def on_emitter(self, listener: Callable[[iam.IGrantable], None]) -> None:
        """Call ``listener`` with each grantee ``grant_emit`` admitted so far, then with each it admits later (the
        control-plane watch watches each emitting function and role)."""
        for grantee in self._emitter_grantees:
            listener(grantee)
        self._emitter_listeners.append(listener)

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

    def _admit_emitter(self, grantee: iam.IGrantable) -> bool:
        """Name ``grantee`` in the PutItem Deny; False if it was named already."""
        arn = self._principal_arn(grantee)
        if arn in self._emitters:
            return False
        if len(self._emitters) == MAX_EMITTERS:
            raise ValueError(
                f"grant_emit admits at most {MAX_EMITTERS} roles or users (the events table's resource policy names "
                "each, and DynamoDB keeps a resource policy under 20 KB): let your producers share a role"
            )
        self._emitters.append(arn)
        # The same operator and key again replaces the value (CDK merges conditions by operator and key).
        self._put_deny.add_condition(
            "ArnNotEquals", {"aws:PrincipalArn": [self.operator_role.role_arn, *self._emitters]}
        )
        return True

    def _principal_arn(self, grantee: iam.IGrantable) -> str:
        """The ARN ``aws:PrincipalArn`` carries for ``grantee``'s requests: its role's (a role session's is its
        role's, R10.1) or its user's. Anything else cannot be admitted by ARN, and is refused here."""
        principal = grantee.grant_principal
        arn = getattr(principal, "role_arn", None) or getattr(principal, "user_arn", None)
        if not isinstance(arn, str):
            raise ValueError(
                f"grant_emit needs a role or a user (a Lambda function, an iam.Role, iam.Role.from_role_arn(...)), "
                f"got {principal}: the events table's resource policy refuses PutItem on event rows to every "
                "principal it does not name by ARN"
            )
        one_principal_arn(self, arn, "grant_emit", "the events table's Deny of PutItem on event rows")
        if not isinstance(principal, Construct):
            return arn
        owner = Stack.of(principal)
        if owner is not Stack.of(self) and Token.is_unresolved(arn):
            # The table's policy would import the role's ARN and the role's policy the table's ARN: a cycle.
            raise ValueError(
                f"grant_emit: {principal.node.path} is in stack {owner.stack_name}, the events table in "
                f"{Stack.of(self).stack_name}, and the table's resource policy names every emitter's ARN. Give "
                "the role a role_name and pass iam.Role.from_role_arn(<a scope in the pipeline's stack>, ..., "
                "its ARN) here, or create the producer in the pipeline's stack"
            )
        return arn

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

    def _deny_event_row_put_to_all_but_the_emitters(self) -> iam.PolicyStatement:
        """``PutItem`` and ``UpdateItem`` of an event row, a head or an index row (an append, a head moved, or an
        overwrite) for the operator role and the emitters only; the rest of the account (administrators, CI, the
        root user, this app's other roles) is refused. It binds a transaction's writes too: ``TransactWriteItems``
        is authorised per item, as its ``PutItem`` or ``UpdateItem``. An emitter can still overwrite a row (IAM
        cannot tell that from an append): the tamper pipe detects it for event rows."""
        statement = iam.PolicyStatement(
            sid=PUT_DENY_SID,
            effect=iam.Effect.DENY,
            principals=[iam.AnyPrincipal()],
            actions=list(CHAIN_ROW_WRITES),
            resources=["*"],
            conditions={**CHAIN_ROW_CONDITIONS, "ArnNotEquals": {"aws:PrincipalArn": [self.operator_role.role_arn]}},
        )
        self.table.add_to_resource_policy(statement)
        return statement

    def _deny_head_and_index_row_removal_to_all_but_the_operator_role(self) -> None:
        """A head or an index row deleted (``DeleteItem``, a ``BatchWriteItem``, PartiQL) by anyone but the operator
        role: emit() never does, and a tenant without its index row is in no check (the hourly pass, status and
        ``verify-chain --all`` enumerate the index)."""
        self.table.add_to_resource_policy(
            iam.PolicyStatement(
                sid=REMOVAL_DENY_SID,
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=list(CHAIN_ROW_REMOVALS),
                resources=["*"],
                conditions={
                    "ForAnyValue:StringLike": {
                        "dynamodb:LeadingKeys": [HEAD_PARTITION_PATTERN, TENANT_INDEX_PARTITION_PATTERN]
                    },
                    "Null": {"dynamodb:LeadingKeys": "false"},
                    "ArnNotEquals": {"aws:PrincipalArn": [self.operator_role.role_arn]},
                },
            )
        )

    def _deny_requests_without_tls(self) -> None:
        """Every DynamoDB action on the table, by any principal, when the request did not come over TLS
        (``aws:SecureTransport`` false), as the queues' and the topic's policies refuse theirs. A request without
        the key (a service's on its own behalf, if any) is not denied: ``Bool`` is false on an absent key."""
        self.table.add_to_resource_policy(
            iam.PolicyStatement(
                sid=TLS_DENY_SID,
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["dynamodb:*"],
                resources=["*"],
                conditions={"Bool": {"aws:SecureTransport": "false"}},
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
        - ``PutItem`` is not in this statement: every emitter appends with it, and IAM cannot tell an append
          from an overwrite. The next statement refuses it to all but the operator role and the emitters.
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
