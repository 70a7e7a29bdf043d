"""The queue-driven lanes' timing, in one place so that no two numbers can drift apart.

Each consumer's function timeout, its event source mapping's batching window and the queues' redrive
count live here; each queue's visibility timeout is derived from them, never written down twice. AWS
asks for a visibility timeout of at least 6x the function timeout plus the batching window
(docs/aws-behaviour.md R6.4): on the durable lane a message must not become visible again while a live handler
still holds its inbox lease, or a second worker would claim it; on the record-change lane it would run
a best-effort handler twice for no reason. The consumer and queue constructs import these values.
"""

from __future__ import annotations

# The consumer's Lambda timeout. Handlers may call remote APIs, so a minute rather than the 3 s default;
# the inbox lease is sized from the remaining time, so this is also the longest a lease can live.
CONSUMER_TIMEOUT_SECONDS = 60

# The SQS event source mapping's MaximumBatchingWindowInSeconds. Zero: Lambda does not support a batching
# window on FIFO queues, and the relay already batches upstream. Kept here so the formula stays honest
# if that ever changes.
CONSUMER_BATCHING_WINDOW_SECONDS = 0

# The record-change consumer's Lambda timeout. Half the durable one: best-effort handlers update
# projections in the data table (a few DynamoDB writes per record, ten records a batch), and a shorter
# timeout brings a failed record back sooner, since its retry waits out the visibility timeout below.
RECORD_CHANGE_CONSUMER_TIMEOUT_SECONDS = 30

# The record-change mapping's MaximumBatchingWindowInSeconds. Zero: the pipe already sends in batches of
# up to ten, which is the mapping's batch size, so waiting would add latency and save no invocation.
RECORD_CHANGE_BATCHING_WINDOW_SECONDS = 0

# How many times the durable consumer starts a handler for one (event, subscription) before the pair is
# dead. The claim counts them, not the queue: a message skipped behind a failing neighbour of its tenant's
# group collects receives without an attempt, so ApproximateReceiveCount cannot say how often it ran.
MAX_ATTEMPTS = 5

# Messages per batch on both event source mappings: SQS hands Lambda at most 10 from a FIFO queue, and
# the standard queue's consumer takes the same, the most one pipe batch holds.
CONSUMER_BATCH_SIZE = 10

# SQS's upper bound for a redrive policy's maxReceiveCount.
SQS_MAX_RECEIVE_COUNT = 1000

# Receives before SQS moves a record-change message to its DLQ (AWS asks for at least 5, R6.4): that lane
# keeps no claims, so the queue's count is its retry policy.
RECORD_CHANGE_MAX_RECEIVE_COUNT = 5


def durable_max_receive_count(max_attempts: int, batch_size: int) -> int:
    """The durable queue's maxReceiveCount: a transport backstop, never the retry policy.

    A message is received without an attempt of its own when a message ahead of it in its group's batch
    failed (each of the ``batch_size - 1`` ahead fails at most ``max_attempts`` times per subscription
    before its claim is dead and it is acknowledged) or when a live lease elsewhere sends it back. Twice
    ``max_attempts * batch_size`` covers a head whose two subscriptions fail in turn; only a message the
    consumer cannot process at all (a function that fails before it reads the batch) gets that far.

    Example
    -------
    >>> durable_max_receive_count(5, 10)
    100
    """
    if max_attempts < 1 or not 1 <= batch_size <= 10:
        raise ValueError("max_attempts must be at least 1 and the FIFO batch size 1..10")
    return min(SQS_MAX_RECEIVE_COUNT, 2 * max_attempts * batch_size)


DURABLE_MAX_RECEIVE_COUNT = durable_max_receive_count(MAX_ATTEMPTS, CONSUMER_BATCH_SIZE)

# -- retention: how long each stage may hold a message, and so how long the inbox must remember --------

# The relay pipe's MaximumRecordAgeInSeconds: older stream records go to the pipe's DLQ unsent.
RELAY_MAXIMUM_RECORD_AGE_HOURS = 12
# The consumers' queues keep a message as long as SQS allows: a consumer down for days loses nothing.
QUEUE_RETENTION_DAYS = 14
# Every DLQ keeps its messages as long as SQS allows; a FIFO DLQ restarts the clock on the move.
DEAD_LETTER_RETENTION_DAYS = 14
# Clock skew and a sweep that runs late.
RETENTION_MARGIN_DAYS = 1


def minimum_inbox_retention_days() -> int:
    """How long the inbox must remember a completion: the longest a pipe message can travel (stream record
    age, queue, DLQ) before a consumer sees it. A shorter memory is not unsafe (the consumer refuses to
    run a message older than the inbox's memory and dead-letters it as unverifiable) but it would turn
    redriven work into dead letters an operator must decide on.

    Example
    -------
    >>> minimum_inbox_retention_days()
    30
    """
    hours = RELAY_MAXIMUM_RECORD_AGE_HOURS + 24 * (
        QUEUE_RETENTION_DAYS + DEAD_LETTER_RETENTION_DAYS + RETENTION_MARGIN_DAYS
    )
    return -(-hours // 24)


# AWS's minimum factor between the function timeout and the queue's visibility timeout.
VISIBILITY_TIMEOUT_FACTOR = 6

# SQS's upper bound for a visibility timeout (12 hours).
MAX_VISIBILITY_TIMEOUT_SECONDS = 12 * 60 * 60


def visibility_timeout_seconds(function_timeout_seconds: int, batching_window_seconds: int) -> int:
    """The queue visibility timeout for a consumer with this timeout and batching window.

    Parameters
    ----------
    function_timeout_seconds
        The consumer function's timeout.
    batching_window_seconds
        The event source mapping's MaximumBatchingWindowInSeconds (0 when there is none).

    Example
    -------
    >>> visibility_timeout_seconds(60, 0)
    360
    """
    if function_timeout_seconds <= 0 or batching_window_seconds < 0:
        raise ValueError("the function timeout must be positive and the batching window not negative")
    derived = VISIBILITY_TIMEOUT_FACTOR * function_timeout_seconds + batching_window_seconds
    if derived > MAX_VISIBILITY_TIMEOUT_SECONDS:
        raise ValueError(f"visibility timeout {derived}s exceeds SQS's {MAX_VISIBILITY_TIMEOUT_SECONDS}s")
    return derived


# Lambda's upper bound for a function timeout, and the least a consumer gets: the inbox lease is sized from
# the invocation's remaining time, and a handler with less than this has no room for a remote call.
MAX_FUNCTION_TIMEOUT_SECONDS = 900
MIN_CONSUMER_TIMEOUT_SECONDS = 10


def consumer_timeout_seconds(label: str, seconds: float) -> int:
    """A consumer's timeout as whole seconds, refused (with what to pass instead) outside 10..900.

    Example
    -------
    >>> consumer_timeout_seconds("durable consumer", 120)
    120
    """
    if seconds != int(seconds) or not MIN_CONSUMER_TIMEOUT_SECONDS <= seconds <= MAX_FUNCTION_TIMEOUT_SECONDS:
        raise ValueError(
            f"the {label}'s timeout must be whole seconds from {MIN_CONSUMER_TIMEOUT_SECONDS} to "
            f"{MAX_FUNCTION_TIMEOUT_SECONDS} (Lambda's limit), got {seconds!r}: its queue's visibility timeout is "
            f"{VISIBILITY_TIMEOUT_FACTOR}x that, and its inbox lease lives at most that long"
        )
    return int(seconds)


QUEUE_VISIBILITY_TIMEOUT_SECONDS = visibility_timeout_seconds(
    CONSUMER_TIMEOUT_SECONDS, CONSUMER_BATCHING_WINDOW_SECONDS
)
RECORD_CHANGE_QUEUE_VISIBILITY_TIMEOUT_SECONDS = visibility_timeout_seconds(
    RECORD_CHANGE_CONSUMER_TIMEOUT_SECONDS, RECORD_CHANGE_BATCHING_WINDOW_SECONDS
)


# -- persistent failure: how long a consumer's failures must last before its alarm fires -----------------

# Periods in a row with a failure counted. A message whose handler fails on every receive is received again
# one visibility timeout after each receive, so each period of the length below holds one of its failures:
# three periods are about three failures in a row, before the durable consumer's MAX_ATTEMPTS makes the pair
# a dead letter or the record-change queue's maxReceiveCount moves the message to its DLQ. One transient
# failure fills one period, not three.
PERSISTENT_FAILURE_PERIODS = 3
# CloudWatch's bound for periods x evaluation periods (docs/aws-behaviour.md R9.5).
MAX_ALARM_EVALUATION_SECONDS = 24 * 60 * 60


def persistent_failure_period_seconds(visibility_timeout_seconds: int) -> int:
    """The period of a consumer's persistent-failure alarm: its queue's visibility timeout rounded up to whole
    minutes (alarm periods are whole minutes, R9.5), plus one minute for the poll and the run that fail it again.

    Example
    -------
    >>> persistent_failure_period_seconds(360)
    420
    >>> persistent_failure_period_seconds(180)
    240
    """
    if visibility_timeout_seconds <= 0:
        raise ValueError("the visibility timeout must be positive")
    period = (-(-visibility_timeout_seconds // 60) + 1) * 60
    if period * PERSISTENT_FAILURE_PERIODS > MAX_ALARM_EVALUATION_SECONDS:
        raise ValueError(f"{PERSISTENT_FAILURE_PERIODS} periods of {period}s exceed CloudWatch's one day")
    return period


# -- completeness: how long a pair may go without an outcome before it is missing ----------------------

# The pipes' MaximumBatchingWindowInSeconds: none is set (a stream pipe sends what each poll reads at once).
PIPE_BATCHING_WINDOW_SECONDS = 0
# Clock skew between the producers that stamp occurred_at and the pass, and a pass that runs late.
COMPLETENESS_MARGIN_SECONDS = 60 * 60


def completeness_bound_seconds(
    *,
    record_age_seconds: int,
    pipe_batching_window_seconds: int,
    visibility_timeout_seconds: int,
    max_receive_count: int,
    consumer_batching_window_seconds: int,
    max_attempts: int,
    lease_seconds: int,
) -> int:
    """The longest a durable pair may go without an outcome (``outbox.ops.completeness``) while nothing is wrong:
    past it, the pair is missing, since every legitimate delay has an end within it, or an alarm of its own.

    A stream record reaches the queue within the relay pipe's maximum record age (its retries and the pipe's
    batching window inside it), or goes to the pipe's alarmed DLQ. In the queue a message is received at most
    ``max_receive_count`` times, one visibility timeout (and batching window) apart, before SQS moves it to the
    alarmed durable DLQ; the claim's attempts are fewer than those receives, and the last attempt's lease ends
    within one more function timeout. A margin covers clock skew and a pass that runs late.

    Example
    -------
    >>> completeness_bound_seconds(record_age_seconds=43200, pipe_batching_window_seconds=0,
    ...     visibility_timeout_seconds=360, max_receive_count=100, consumer_batching_window_seconds=0,
    ...     max_attempts=5, lease_seconds=60)
    82860
    """
    if max_attempts < 1 or max_receive_count < max_attempts:
        raise ValueError(
            f"the durable queue's maxReceiveCount ({max_receive_count}) must be at least the claim's attempts "
            f"({max_attempts}): SQS would move a message to the DLQ before the consumer made its pair dead"
        )
    if lease_seconds > visibility_timeout_seconds:
        raise ValueError("the inbox lease outlives the queue's visibility timeout: a live lease would be taken over")
    queue = max_receive_count * (visibility_timeout_seconds + consumer_batching_window_seconds)
    return record_age_seconds + pipe_batching_window_seconds + queue + lease_seconds + COMPLETENESS_MARGIN_SECONDS


def check_completeness_bound(bound_seconds: int, inbox_retention_days: int, pass_seconds: int) -> None:
    """Refuse a bound the repair it names cannot keep: a missing pair is found within two passes past the bound,
    and ``outbox reconcile`` re-sends only what the inbox can still vouch for (its retention less a margin)."""
    vouched = inbox_retention_days * 24 * 3600 - 3600
    if bound_seconds + 2 * pass_seconds > vouched:
        raise ValueError(
            f"the completeness bound ({bound_seconds}s, from the durable queue's visibility timeout and receive "
            f"count and the relay pipe's record age) and two passes exceed what reconcile can vouch for with an "
            f"inbox retention of {inbox_retention_days} days: raise inbox_retention_days, or lower "
            "durable_consumer=ConsumerOptions(timeout=...)"
        )
