"""``OutboxPipeline``: the whole outbox in one construct, added to a stack of yours.

    pipeline = OutboxPipeline(
        self, "Outbox",
        code=lambda_.Code.from_asset("src"),          # your modules (the engine comes in its layer)
        catalog="shop.catalog:build",                 # returns your outbox.Catalog
        data_tables=[orders],                         # tables your handlers write, as ITable
        environment={"ORDERS_TABLE": orders.table_name},
        alarms=Alarms.email("ops@example.com"),       # or Alarms.topic(topic), or Alarms.nobody("why")
        operators=[iam.ArnPrincipal(oncall_role_arn)],  # who may assume the operator role
        record_changes=RecordChanges(orders),         # optional: BEST_EFFORT subscriptions on its rows
    )
    pipeline.grant_emit(my_api_function)              # your producers commit events with emit()

DURABLE lane: events table stream -> relay pipe -> FIFO queue -> durable consumer (the inbox's claims).
BEST_EFFORT lane, when ``record_changes`` is given: its table's stream -> record-change pipe ->
standard queue -> record-change consumer. Every queue has a dead-letter queue that only its failures reach,
with an alarm at zero and one on each later arrival; pipes, queues and consumers have alarms and one
dashboard, whose status widget says what needs an operator; an IAM-signed operator endpoint reports the chains
and the dead work. Two roles for people: the operator role repairs event rows, the runbook role runs the
``outbox`` CLI's runbook (``outbox_cdk.runbook_role``). The stack outputs are ``outbox.outputs.StackOutput``,
which the ``outbox`` CLI reads: one pipeline per stack.

One file: the construct a user reads first, its parameters documented where they are declared, and the
wiring of the parts, each a construct of its own module; its grouped options are ``outbox_cdk.options``, and
what it refuses at synth is ``outbox_cdk.pipeline_checks``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from aws_cdk import Annotations, CfnOutput, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct

from outbox.catalog import Catalog
from outbox.ops.completeness import catalog_data
from outbox.outputs import StackOutput
from outbox.redaction import ErrorDetail
from outbox_cdk import inbox_table, timing, workflow_function
from outbox_cdk.alarm_topic import AlarmTopic
from outbox_cdk.audit import ANCHOR_SCHEDULE, ANCHOR_SERVICE, ANCHORING_SCHEDULE_ID, Auditor, AuditTable
from outbox_cdk.catalog_check import ACCEPTED_METADATA, AcceptedCatalogProblem, load_checked_catalog
from outbox_cdk.completeness import COMPLETENESS_INBOX_READ_ACTIONS, check_completeness
from outbox_cdk.control_plane import ControlPlaneWatch
from outbox_cdk.durable_consumer import DurableConsumer
from outbox_cdk.durable_queue import DurableQueue
from outbox_cdk.encryption import admit_cloudwatch_logs, admit_eventbridge_dead_letters
from outbox_cdk.engine_layer import EngineLayer
from outbox_cdk.events_table import EventsTable
from outbox_cdk.grants import grant_items, one_principal_arn
from outbox_cdk.inbox_table import InboxTable
from outbox_cdk.lambda_defaults import ApplicationCode
from outbox_cdk.monitoring import PipelineMonitoring, RecordChangeLane
from outbox_cdk.operator_endpoint import OperatedPipeline, OperatorEndpoint, StatusReader
from outbox_cdk.options import (
    Alarms,
    ConsumerOptions,
    Grouped,
    OperatorAccess,
    PipeLogs,
    RecordChanges,
    WorkflowOptions,
    read_flat_options,
)
from outbox_cdk.pipeline_checks import (
    check_alarm_subscriber,
    check_entities,
    check_options,
    error_detail_of,
    operators_of,
    timeout_seconds,
)
from outbox_cdk.record_change_consumer import RecordChangeConsumer
from outbox_cdk.record_change_pipe import RecordChangePipe
from outbox_cdk.record_change_queue import RecordChangeQueue
from outbox_cdk.relay_pipe import RelayPipe
from outbox_cdk.rule_names import rule_arn, rule_name
from outbox_cdk.runbook_role import RunbookRole
from outbox_cdk.status_widget import StatusWidget
from outbox_cdk.workflow_function import WorkflowFunctions
from outbox_cdk.workflow_settler import SETTLE_SCHEDULE_ID

# The most missing pairs one completeness pass may re-send itself (completeness_repairs).
MAX_COMPLETENESS_REPAIRS = 100
# The operators' read-only functions (the operator endpoint, the status widget), built alike.
Reader = TypeVar("Reader", bound=StatusReader)
# Lambda's 4 KB for all of a function's variables, less what the anchoring's others take.
MAX_CATALOG_DATA_LENGTH = 3000


class OutboxPipeline(Construct):
    """The outbox pipeline. Every resource is a property, for grants, dashboards and alarms of your own.

    Parameters
    ----------
    code
        Your modules as a Lambda code asset, without the engine or its dependencies (the engine layer
        carries them), e.g. ``lambda_.Code.from_asset("src", exclude=["tests", "**/__pycache__"])``.
    catalog
        ``"package.module:function"`` inside ``code``, returning your ``outbox.Catalog``; every function
        of the pipeline calls it at cold start, with ``environment``.
    data_tables
        The tables your handlers write (``ITable``; imported tables work): the consumers may read and
        write them, and a durable handler's writes commit in one transaction with its completion.
    environment
        Variables for every function of the pipeline (your table names, your service URLs). Published as
        the ``ApplicationEnvironment`` output, so ``outbox --catalog ...`` builds your catalog the same way.
    alarms
        Who reads the alarms, exactly one answer (``outbox_cdk.Alarms``): ``Alarms.email(address)`` (subscribed to
        the encrypted topic the pipeline creates), ``Alarms.topic(topic)`` (an SNS topic of yours for every alarm;
        it must let CloudWatch publish and, if encrypted, use its key) or ``Alarms.nobody(reason)`` (nobody
        subscribes here, the reason recorded on the topic). Required: alarms that notify nobody are a choice
        someone made, never a default.
    operators
        Who may assume the operator role (the one role that may repair event rows, and call the operator
        endpoint) and the runbook role (the CLI's runbook: status, replay, redrive, reconcile): your on-call
        role, say, ``[iam.ArnPrincipal("arn:aws:iam::123456789012:role/oncall")]``.
        Required: ``[iam.AccountRootPrincipal()]`` lets every principal of the account that its own IAM policy
        allows ``sts:AssumeRole``, and is a choice to make on purpose.
    operator_access
        How ``operators`` reach the pipeline (``outbox_cdk.OperatorAccess``): ``trust``, what every assumption of
        the two roles must show besides coming from ``operators`` (``OperatorTrust(require_mfa=True)``, or
        ``OperatorTrust(principal_tag=("team", "oncall"))``; None: the ``operators`` alone decide), and
        ``endpoint_concurrency``, the reserved concurrency of the operator endpoint and of the dashboard's status
        widget, each (2; None for no reservation, where the account's unreserved pool has no room).
    durable_consumer
        The durable consumer's ``max_concurrency`` (2..1000) and ``timeout`` (10 s..15 min, 60 s by default)
        (``outbox_cdk.ConsumerOptions``). Its queue's visibility timeout is six times the timeout (AWS's rule) and
        its queue-age alarm two visibility timeouts; a durable handler's inbox lease lives at most that long, so
        give slow remote calls room here.
    record_changes
        The BEST_EFFORT lane (``outbox_cdk.RecordChanges``): ``source``, a table of yours whose stream (new and
        old images) feeds it; ``entities``, the entities whose row changes your BEST_EFFORT subscriptions watch
        (the record-change pipe drops every other row's change at the source; None: every row change); and
        ``consumer``, its consumer's options (30 s timeout by default). None: no record-change lane.
    pipe_logs
        The pipes' log ``level`` (OFF, ERROR, INFO, TRACE) and whether their logs carry the records' payload
        (``execution_data``) (``outbox_cdk.PipeLogs``).
    inbox_retention_days
        How long a completion is remembered: at least as long as a message may travel (pipe record age,
        queue and DLQ retention), 30..365 days.
    encryption_key
        An optional customer-managed KMS key for tables, queues and logs: the events and inbox tables
        (``TableEncryption.CUSTOMER_MANAGED``), every queue and dead-letter queue of the pipeline (SSE-KMS)
        and the log group of every function and pipe of the pipeline use it, and every role of the pipeline,
        the operator role and each producer granted ``grant_emit`` are granted what they need on it (anyone
        else who reads the tables or queues, your own tools included, needs ``kms:Decrypt`` on it too). Your
        own tables and the alarm topic keep their keys. A key of this app (``kms.Key``) gets the key
        policy statements CloudWatch Logs and EventBridge need; a key imported by ARN (``kms.Key.from_key_arn``)
        cannot be changed, so its policy must already admit ``logs.<region>.amazonaws.com`` (``kms:Encrypt*``,
        ``kms:Decrypt*``, ``kms:ReEncrypt*``, ``kms:GenerateDataKey*``, ``kms:Describe*``, with ``ArnLike``
        ``kms:EncryptionContext:aws:logs:arn`` on this account's and region's log groups) and
        ``events.amazonaws.com`` (``kms:Decrypt``, ``kms:GenerateDataKey``, for the anchoring schedule's and the
        control-plane watch's rules, which write to their DLQs; a key of this app admits those rules alone, by
        the ARNs of their names): the synth warns, and without the first
        the log groups fail to deploy. It must also let this account's IAM policies grant it
        (the default key policy does). None: AWS-managed and AWS-owned keys, as before.
    error_detail
        What a durable handler's failure says in the consumer's log and in its dead letters and claims
        (``outbox.redaction``). ``REDACTED`` (the default): its type and where it was raised, a validation
        error's field locations and error types, a ``TerminalError``'s own message; never the text of any
        other exception, which may repeat the personal data the handler was given. ``FULL``: every message,
        for stacks that hold no real people's data.
    ordered_subscriptions
        True when the catalog declares a ``Subscription(..., ordered=True)``: the durable consumer may then
        read and delete its watermark and deferred rows, query the log for an event's predecessor, and send a
        deferred event back to the durable queue (``outbox.pairs.order``). The consumer refuses to start with an
        ordered subscription on a pipeline without it, and says to set it.
    watch_control_plane
        True: one EventBridge rule per service reports, on the alarm topic, each CloudTrail management call that
        could lift a guard of this pipeline or silence it (``outbox_cdk.control_plane.WATCHED_CALLS``): the events
        table's resource policy, stream, TTL or deletion; a queue's policy, attributes, purge or deletion; a
        pipe stopped, updated or deleted; an alarm of the stack disabled, rewritten or deleted; the alarm topic's
        key disabled, scheduled for deletion or its policy rewritten; the alarm topic's policy, deletion and
        subscriptions. Two more rules watch the watch (any watch rule disabled, deleted or retargeted is reported
        by another), one reports a trail stopped or made to log less, and the Lambda rules report new code,
        configuration, versions, aliases or permissions on every function whose role may emit (each one
        ``grant_emit`` admits, even after this) or anchor, and any function given one of their roles (as many
        rules as EventBridge's limit needs; ``self.control_plane.watch_function`` adds one). It needs a
        CloudTrail trail that logs this region's management events (the README says how to check), and reports
        deploys that change these settings too. With ``Alarms.topic`` of yours, its policy (and its key's) must admit
        ``events.amazonaws.com`` (the synth warns), and its key is not watched. False (the default): nothing
        watches the control plane (docs/security.md, "Not caught").
    accept_catalog_problems
        The synth loads ``catalog`` from ``code`` and fails on its contract's problems (``Catalog.problems()``:
        a glob that matches nothing, a handler on a lane that never carries its events, a type nothing emits).
        Each ``AcceptedCatalogProblem(problem=<part of its text>, reason=...)`` lets one through, recorded in
        the template's metadata; one that matches no problem fails the synth too (remove it).
    completeness_repairs
        The hourly completeness pass (``outbox.ops.completeness``) finds every durable (event, subscription) pair
        with no outcome past a bound derived from this pipeline's settings, and raises ``MissingPairsAlarm``.
        0 (the default): it only reports (``outbox status`` names the repair). N, up to 100: it also re-sends at
        most N missing pairs a pass itself, as ``outbox reconcile`` does (never a pair whose rule says an
        operator decides), each logged with why; the anchoring role may then send to the durable queue.
    workflows
        For each WORKFLOW subscription of the catalog, a durable function of its own (``outbox_cdk.WorkflowFunction``)
        whose executions may run ``execution_timeout`` (30 days by default, at most 366) and whose history Lambda
        keeps ``retention_days`` once closed (30 by default, 1..90) (``outbox_cdk.WorkflowOptions``); with
        ``encryption_key``, the executions' payloads use it.
    flat_options
        The flat options of earlier releases (``alarm_email=``, ``record_changes_from=``, ``consumer_timeout=``,
        ...: ``outbox_cdk.options.FLAT_OPTIONS``), each read into its group with a deprecation warning that says
        what to write instead, until they go.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        catalog: str,
        data_tables: Sequence[dynamodb.ITable] = (),
        environment: Mapping[str, str] | None = None,
        alarms: Alarms | None = None,
        operators: Sequence[iam.IPrincipal] | None = None,
        operator_access: OperatorAccess | None = None,
        durable_consumer: ConsumerOptions | None = None,
        record_changes: RecordChanges | None = None,
        pipe_logs: PipeLogs | None = None,
        workflows: WorkflowOptions | None = None,
        encryption_key: kms.IKey | None = None,
        error_detail: ErrorDetail = ErrorDetail.REDACTED,
        inbox_retention_days: int = inbox_table.DEFAULT_RETENTION_DAYS,
        ordered_subscriptions: bool = False,
        watch_control_plane: bool = False,
        accept_catalog_problems: Sequence[AcceptedCatalogProblem] = (),
        completeness_repairs: int = 0,
        **flat_options: Any,
    ) -> None:
        super().__init__(scope, construct_id)
        given = Grouped(
            alarms=alarms,
            operator_access=operator_access or OperatorAccess(),
            durable_consumer=durable_consumer or ConsumerOptions(),
            record_changes=record_changes,
            pipe_logs=pipe_logs or PipeLogs(),
            workflows=workflows or WorkflowOptions(),
        )
        options, deprecated = read_flat_options(given, flat_options)
        for notice in deprecated:  # cdk synth prints it, where a DeprecationWarning is mostly filtered out
            Annotations.of(self).add_warning_v2("outbox:deprecated-option", notice)
        environment = dict(environment or {})
        source = options.record_changes.source if options.record_changes else None
        check_options(environment, options.pipe_logs.level, source)
        check_entities(options.record_changes.entities if options.record_changes else None, source)
        check_alarm_subscriber(options.alarms)
        self.stack = Stack.of(self)
        consumer_seconds = timeout_seconds(
            "durable consumer", options.durable_consumer.timeout, timing.CONSUMER_TIMEOUT_SECONDS
        )
        self.record_change_timeout_seconds = timeout_seconds(
            "record-change consumer",
            options.record_changes.consumer.timeout if options.record_changes else None,
            timing.RECORD_CHANGE_CONSUMER_TIMEOUT_SECONDS,
        )
        self.encryption_key = encryption_key
        if encryption_key is not None:
            self._admit_services(encryption_key)

        operators = operators_of(operators)
        self.events = EventsTable(
            self,
            "Events",
            operators=operators,
            operator_trust=options.operator_access.trust,
            encryption_key=encryption_key,
        )
        self.engine = EngineLayer(self, "Engine")
        self.application = ApplicationCode(code=code, catalog=catalog, layer=self.engine.layer, environment=environment)
        deployed_catalog, accepted = load_checked_catalog(code, catalog, environment, accept_catalog_problems)
        if accepted:  # in the template, where the testing fixture and a reviewer find them
            self.stack.add_metadata(ACCEPTED_METADATA, [{"problem": a.problem, "reason": a.reason} for a in accepted])
        alarm_answer = options.alarms
        assert alarm_answer is not None  # check_alarm_subscriber refused None
        self.alarm_topic: sns.ITopic = (
            alarm_answer.existing_topic
            or AlarmTopic(
                self, "Alarms", email=alarm_answer.email_address, no_subscriber_reason=alarm_answer.no_subscriber_reason
            ).topic
        )
        data_tables = list(data_tables)
        if source is not None and source not in data_tables:
            data_tables.append(source)

        # Who may send to the lanes' queues besides the pipe that feeds each (every other principal is denied):
        # the roles the CLI's replay, reconcile and redrive run as. One role a line; admit_queue_sender adds more.
        self._queue_senders: list[iam.IRole] = [
            self.events.operator_role,
        ]
        self.record_changes: RecordChangeQueue | None = None
        self.record_change_pipe: RecordChangePipe | None = None
        self.record_change_consumer: RecordChangeConsumer | None = None
        self.durable = DurableQueue(
            self,
            "Durable",
            alarm_topic=self.alarm_topic,
            consumer_timeout_seconds=consumer_seconds,
            encryption_key=encryption_key,
            senders=self._queue_senders,
        )
        self.relay = RelayPipe(
            self,
            "Relay",
            events=self.events,
            target=self.durable.queue,
            alarm_topic=self.alarm_topic,
            log_level=options.pipe_logs.level,
            log_execution_data=options.pipe_logs.execution_data,
            encryption_key=encryption_key,
        )
        self.durable.fed_by(self.relay)
        self.inbox = InboxTable(self, "Inbox", retention_days=inbox_retention_days, encryption_key=encryption_key)
        # Tamper evidence: findings from the stream and hourly anchors, in a table only the auditor and the
        # operator role may write.
        self.audit = AuditTable(self, "Audit", encryption_key=encryption_key)
        self.audit.table.grant_read_write_data(self.events.operator_role)
        self.auditor = Auditor(
            self,
            "Auditor",
            events=self.events,
            audit=self.audit,
            layer=self.engine.layer,
            alarm_topic=self.alarm_topic,
            pipe_log_level=options.pipe_logs.level,
            encryption_key=encryption_key,
            senders=self._queue_senders,
        )
        self.consumer = DurableConsumer(
            self,
            "DurableConsumer",
            queue=self.durable,
            events=self.events,
            inbox=self.inbox,
            data_tables=data_tables,
            application=self.application,
            alarm_topic=self.alarm_topic,
            max_concurrency=options.durable_consumer.max_concurrency,
            timeout_seconds=consumer_seconds,
            encryption_key=encryption_key,
            error_detail=error_detail_of(error_detail),
            ordered_subscriptions=ordered_subscriptions,
        )
        self.workflows = WorkflowFunctions(
            self,
            "Workflows",
            subscriptions=workflow_function.workflow_subscriptions(code, catalog, environment),
            application=self.application,
            consumer=self.consumer.function,
            events=self.events,
            inbox=self.inbox,
            alarm_topic=self.alarm_topic,
            error_detail=error_detail_of(error_detail),
            execution_timeout=options.workflows.execution_timeout,
            retention_days=options.workflows.retention_days,
            encryption_key=encryption_key,
        )
        self.completeness_bound_seconds = self._check_completeness(
            deployed_catalog, consumer_seconds, completeness_repairs
        )
        if options.record_changes is not None:
            self._add_record_change_lane(options.record_changes, data_tables, options.pipe_logs)

        operated = OperatedPipeline(
            events=self.events,
            inbox=self.inbox,
            durable_queue=self.durable,
            relay_pipe=self.relay,
            audit=self.audit,
            auditor=self.auditor,
            record_change_queue=self.record_changes,
            record_change_pipe=self.record_change_pipe,
            workflow_settle_dead_letters=self.workflows.settler.dead_letters.queue if self.workflows.settler else None,
        )
        self.auditor.watch_pipes(list(operated.pipes().values()))  # liveness: each pass reports their states

        def status_reader(kind: type[Reader]) -> Reader:
            """One of the operators' two read-only functions, each with its Errors alarm, named after its kind."""
            return kind(
                self,
                kind.__name__,
                operated=operated,
                application=self.application,
                alarm_topic=self.alarm_topic,
                reserved_concurrency=options.operator_access.endpoint_concurrency,
                encryption_key=encryption_key,
            )

        # Read-only status for operators: chain_intact per tenant, dead letters, DLQ depths.
        self.operator_endpoint = status_reader(OperatorEndpoint)
        self.operator_endpoint.grant_invoke_url(self.events.operator_role)
        # The same, as HTML with the command for each problem, at the top of the dashboard.
        self.status_widget = status_reader(StatusWidget)
        self.status_widget.grant_view(self.events.operator_role)
        # The runbook's repairs: what the outbox CLI calls, assumed by the same operators.
        self.runbook = RunbookRole(
            self, "Runbook", operators=operators, operated=operated, operator_trust=options.operator_access.trust
        )
        self.admit_queue_sender(self.runbook.role)  # its replay, reconcile and redrive send to the lanes' queues
        # Who lifted a guard or silenced an alarm: CloudTrail's record of it, on the alarm topic.
        self.control_plane: ControlPlaneWatch | None = None
        if watch_control_plane:
            self.control_plane = ControlPlaneWatch(
                self, "ControlPlane", operated=operated, alarm_topic=self.alarm_topic, encryption_key=encryption_key
            )
        self.monitoring = self._monitor()
        if self.control_plane is not None:
            self.control_plane.quiet_for(self.monitoring.alarms)
        self._declare_outputs(environment)

    # -- what users build on ------------------------------------------------------------------------

    @property
    def events_table(self) -> dynamodb.ITable:
        return self.events.table

    @property
    def inbox_table(self) -> dynamodb.ITable:
        return self.inbox.table

    @property
    def operator_role(self) -> iam.IRole:
        """The one role that may repair event rows (the others are denied), and may call the operator
        endpoint. It holds nothing on the queues or the inbox: the CLI's runbook is ``runbook_role``'s.
        The queues' policies let both send (``admit_queue_sender`` names any other role that must)."""
        return self.events.operator_role

    @property
    def runbook_role(self) -> iam.IRole:
        """What the ``outbox`` CLI's runbook needs (status, verify-chain, dead-letters, replay, redrive,
        reconcile), and nothing more: it reads the log and may change no event row, reads and writes the inbox as
        replay and reconcile do, redrives the two lanes' DLQs and sends repairs to their queues, and reads the
        queues' depths and age, the pipes' states and the stack's outputs (``RunbookRoleArn``). Assumed by the
        ``operators`` principals, like the operator role."""
        return self.runbook.role

    @property
    def dashboard(self) -> cloudwatch.Dashboard:
        return self.monitoring.dashboard

    @property
    def alarms(self) -> list[cloudwatch.IAlarm]:
        """Every alarm of the pipeline (all notify the alarm topic), for composite alarms of your own."""
        return list(self.monitoring.alarms)

    def admit_queue_sender(self, role: iam.IRole) -> None:
        """Let ``role`` send to the durable, record-change and tamper queues, whose policies deny
        ``sqs:SendMessage`` to every principal but the pipe that feeds each and these roles (the operator role is
        one): a role your repairs run as. A message from it runs every matching subscription, so admit only who
        may repair. A wildcard ARN (``role/*``) is refused: name each role."""
        one_principal_arn(self, role.role_arn, "admit_queue_sender", "the lanes' queues' Deny of SendMessage")
        self._queue_senders.append(role)
        for queue in (self.durable, self.record_changes, self.auditor.queue):
            if queue is not None:
                queue.admit_sender(role)

    def grant_emit(self, grantee: iam.IGrantable) -> None:
        """Let ``grantee`` commit events with ``EventStore.emit`` (never change or delete an event row).
        Grant it your own tables' writes yourself: they commit in the same transaction."""
        self.events.grant_emit(grantee)

    # -- parts --------------------------------------------------------------------------------------

    def _add_record_change_lane(
        self, lane: RecordChanges, data_tables: Sequence[dynamodb.ITable], pipe_logs: PipeLogs
    ) -> None:
        self.record_changes = RecordChangeQueue(
            self,
            "RecordChanges",
            alarm_topic=self.alarm_topic,
            consumer_timeout_seconds=self.record_change_timeout_seconds,
            encryption_key=self.encryption_key,
            senders=self._queue_senders,
        )
        self.record_change_pipe = RecordChangePipe(
            self,
            "RecordChangePipe",
            table=lane.source,
            target=self.record_changes.queue,
            alarm_topic=self.alarm_topic,
            log_level=pipe_logs.level,
            log_execution_data=pipe_logs.execution_data,
            encryption_key=self.encryption_key,
            entities=lane.entities,
        )
        self.record_changes.fed_by(self.record_change_pipe)
        self.record_change_consumer = RecordChangeConsumer(
            self,
            "RecordChangeConsumer",
            queue=self.record_changes,
            data_tables=data_tables,
            application=self.application,
            alarm_topic=self.alarm_topic,
            max_concurrency=lane.consumer.max_concurrency,
            timeout_seconds=self.record_change_timeout_seconds,
            encryption_key=self.encryption_key,
        )

    def _check_completeness(self, catalog: Catalog | None, consumer_seconds: int, repairs: int) -> int | None:
        """The completeness pass on the anchoring function (``outbox.ops.completeness``), with the catalog loaded at
        synth as data and the bound derived from the durable lane's settings; the bound, or None where the synth
        could not load the catalog (inline or S3 code: the synth warns)."""
        if isinstance(repairs, bool) or not isinstance(repairs, int) or not 0 <= repairs <= MAX_COMPLETENESS_REPAIRS:
            raise ValueError(
                f"completeness_repairs must be 0 (off: the pass only reports) to {MAX_COMPLETENESS_REPAIRS} re-sends "
                f"a pass, got {repairs!r}"
            )
        if catalog is None:
            Annotations.of(self).add_warning_v2(
                "outbox:noCompletenessPass",
                "code is not an asset the synth can import, so the completeness pass (MissingPairsAlarm) has no "
                "catalog and is left out: give code as lambda_.Code.from_asset(...)",
            )
            return None
        bound = timing.completeness_bound_seconds(
            record_age_seconds=timing.RELAY_MAXIMUM_RECORD_AGE_HOURS * 3600,
            pipe_batching_window_seconds=timing.PIPE_BATCHING_WINDOW_SECONDS,
            visibility_timeout_seconds=self.durable.visibility_timeout_seconds,
            max_receive_count=self.durable.max_receive_count,
            consumer_batching_window_seconds=timing.CONSUMER_BATCHING_WINDOW_SECONDS,
            max_attempts=timing.MAX_ATTEMPTS,
            lease_seconds=consumer_seconds,
        )
        timing.check_completeness_bound(bound, self.inbox.retention_days, int(ANCHOR_SCHEDULE.to_seconds()))
        data = catalog_data(catalog)
        if len(data) > MAX_CATALOG_DATA_LENGTH:
            raise ValueError(
                f"the catalog's durable subscriptions make {len(data)} characters of data for the completeness pass, "
                f"and the anchoring function's environment holds {MAX_CATALOG_DATA_LENGTH} (Lambda's 4 KB for all "
                "its variables): shorten the subscriptions' names or patterns (a glob can cover several types)"
            )
        if repairs:
            assert self.auditor.anchoring.role is not None
            self.admit_queue_sender(self.auditor.anchoring.role)
        # `outbox anchor` runs the same pass as the operator role (outbox.ops.anchoring): it reads the claims too
        grant_items(self.inbox.table, self.events.operator_role, COMPLETENESS_INBOX_READ_ACTIONS)
        self.auditor.missing_pairs_alarm = check_completeness(
            self.auditor,
            self.auditor.anchoring,
            audit=self.audit,
            catalog_data=data,
            inbox=self.inbox,
            bound_seconds=bound,
            durable_queue=self.durable.queue,
            repairs=repairs,
            alarm_topic=self.alarm_topic,
            service=ANCHOR_SERVICE,
            period=ANCHOR_SCHEDULE,
        )
        return bound

    def _admit_services(self, key: kms.IKey) -> None:
        # A warning, not a ValueError, for a key imported by ARN: its policy may well admit CloudWatch Logs and
        # EventBridge already, which the synth cannot see, and refusing it would refuse the usual shape of a
        # central key.
        admitted = admit_cloudwatch_logs(self, key)
        admitted = admit_eventbridge_dead_letters(self, key, self._eventbridge_rule_arns) and admitted
        if not admitted:
            Annotations.of(self).add_warning_v2(
                "outbox:encryptionKeyPolicy",
                f"encryption_key {key.key_arn} is imported: its key policy cannot be changed here and must "
                "admit CloudWatch Logs (logs.<region>.amazonaws.com) for this account's log groups, or the "
                "pipeline's log groups fail to deploy, and EventBridge (events.amazonaws.com) for this account's "
                "rules, or what they cannot deliver is lost (see OutboxPipeline's encryption_key).",
            )

    def _eventbridge_rule_arns(self) -> list[str]:
        """The rules whose targets' DLQs the key encrypts: the anchoring schedule's, the settle pass's (with WORKFLOW
        subscriptions), and the watch's, if on."""
        schedule = rule_arn(self, rule_name(self.auditor, ANCHORING_SCHEDULE_ID))  # its name, not a reference
        settler = self.workflows.settler
        settle = [rule_arn(self, rule_name(settler, SETTLE_SCHEDULE_ID))] if settler is not None else []
        return [schedule, *settle, *(self.control_plane.named_rule_arns() if self.control_plane is not None else [])]

    def _monitor(self) -> PipelineMonitoring:
        dead_letters = [("durable DLQ", self.durable.dead_letters), ("relay pipe DLQ", self.relay.dead_letters)]
        dead_letters += self.auditor.dead_letters + self.workflows.dead_letters
        if self.control_plane is not None:
            dead_letters.append(("control-plane watch DLQ", self.control_plane.dead_letters))
        lane = None
        if self.record_changes and self.record_change_pipe and self.record_change_consumer:
            dead_letters += [
                ("record-change DLQ", self.record_changes.dead_letters),
                ("record-change pipe DLQ", self.record_change_pipe.dead_letters),
            ]
            lane = RecordChangeLane(
                pipe_name=self.record_change_pipe.pipe_name,
                queue=self.record_changes.queue,
                consumer=self.record_change_consumer,
                visibility_timeout_seconds=self.record_changes.visibility_timeout_seconds,
            )
        return PipelineMonitoring(
            self,
            "Monitoring",
            alarm_topic=self.alarm_topic,
            relay_pipe_name=self.relay.pipe_name,
            durable_queue=self.durable.queue,
            consumer=self.consumer,
            inbox=self.inbox,
            record_change=lane,
            durable_visibility_timeout_seconds=self.durable.visibility_timeout_seconds,
            dead_letter_queues=[(label, dlq.queue) for label, dlq in dead_letters],
            dead_letter_alarms=[alarm for _, dlq in dead_letters for alarm in dlq.alarms],
            operator_endpoint_alarms=self.operator_endpoint.alarms,
            audit_alarms=self.auditor.alarms,
            tamper_pipe_name=self.auditor.pipe.pipe_name,
            status=self.status_widget.widget,
            status_alarms=self.status_widget.alarms,
            workflows=self.workflows.settler,
        )

    def _declare_outputs(self, environment: Mapping[str, str]) -> None:
        values: dict[StackOutput, str] = {
            StackOutput.EVENTS_TABLE: self.events.table.table_name,
            StackOutput.OPERATOR_ROLE: self.events.operator_role.role_arn,
            StackOutput.RUNBOOK_ROLE: self.runbook.role.role_arn,
            StackOutput.DURABLE_QUEUE: self.durable.queue.queue_url,
            StackOutput.DURABLE_DEAD_LETTER_QUEUE: self.durable.dead_letter_queue.queue_url,
            StackOutput.RELAY_PIPE: self.relay.pipe_name,
            StackOutput.RELAY_DEAD_LETTER_QUEUE: self.relay.dead_letter_queue.queue_url,
            StackOutput.INBOX_TABLE: self.inbox.table.table_name,
            StackOutput.INBOX_RETENTION_DAYS: str(self.inbox.retention_days),
            StackOutput.DURABLE_CONSUMER_FUNCTION: self.consumer.function.function_name,
            StackOutput.AUDIT_TABLE: self.audit.table.table_name,
            StackOutput.TAMPER_PIPE: self.auditor.pipe.pipe_name,
            StackOutput.TAMPER_QUEUE: self.auditor.queue.queue.queue_url,
            StackOutput.TAMPER_DEAD_LETTER_QUEUE: self.auditor.queue.dead_letter_queue.queue_url,
            StackOutput.TAMPER_PIPE_DEAD_LETTER_QUEUE: self.auditor.pipe.dead_letter_queue.queue_url,
            StackOutput.ANCHORING_FUNCTION: self.auditor.anchoring.function_name,
            StackOutput.TAMPER_RECORDER_FUNCTION: self.auditor.recorder.function.function_name,
            StackOutput.ANCHORING_DEAD_LETTER_QUEUE: self.auditor.anchoring_dead_letters.queue.queue_url,
            StackOutput.ALARM_TOPIC: self.alarm_topic.topic_arn,
            StackOutput.OPERATOR_ENDPOINT: self.operator_endpoint.url.url,
            StackOutput.APPLICATION_ENVIRONMENT: self.stack.to_json_string(dict(environment)),
        }
        if self.record_changes and self.record_change_pipe and self.record_change_consumer:
            values |= {
                StackOutput.RECORD_CHANGE_QUEUE: self.record_changes.queue.queue_url,
                StackOutput.RECORD_CHANGE_DEAD_LETTER_QUEUE: self.record_changes.dead_letter_queue.queue_url,
                StackOutput.RECORD_CHANGE_PIPE: self.record_change_pipe.pipe_name,
                StackOutput.RECORD_CHANGE_PIPE_DEAD_LETTER_QUEUE: (self.record_change_pipe.dead_letter_queue.queue_url),
                StackOutput.RECORD_CHANGE_CONSUMER_FUNCTION: self.record_change_consumer.function.function_name,
            }
        if self.workflows.settler is not None:
            values[StackOutput.WORKFLOW_SETTLE_DEAD_LETTER_QUEUE] = self.workflows.settler.dead_letters.queue.queue_url
        for output, value in values.items():
            if self.stack.node.try_find_child(output.value) is not None:
                raise ValueError(
                    f"{self.stack.stack_name} already has an output {output.value}: one OutboxPipeline per stack "
                    "(the outbox CLI finds a pipeline by its stack's outputs)"
                )
            # In the stack's scope, so the output ids are exactly the names the CLI reads.
            CfnOutput(self.stack, output.value, value=value)
