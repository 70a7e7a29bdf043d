"""The queue-driven lanes' timing, in one place so that no two numbers can drift apart.

Each consumer's function timeout, its event source mapping's batching window and the queues' redrive
count live here; each queue's visibility timeout is derived from them, never written down twice. AWS
asks for a visibility timeout of at least 6x the function timeout plus the batching window
(AWS-SEMANTICS R6.4): on the durable lane a message must not become visible again while a live handler
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

# Receives before SQS moves a message to the dead-letter queue (AWS asks for at least 5, R6.4), on both
# queues. The durable consumer's last attempt (ApproximateReceiveCount == MAX_RECEIVE_COUNT) marks the
# claim dead; the record-change consumer keeps no claims and simply lets SQS move the message.
MAX_RECEIVE_COUNT = 5

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


QUEUE_VISIBILITY_TIMEOUT_SECONDS = visibility_timeout_seconds(
    CONSUMER_TIMEOUT_SECONDS, CONSUMER_BATCHING_WINDOW_SECONDS
)
RECORD_CHANGE_QUEUE_VISIBILITY_TIMEOUT_SECONDS = visibility_timeout_seconds(
    RECORD_CHANGE_CONSUMER_TIMEOUT_SECONDS, RECORD_CHANGE_BATCHING_WINDOW_SECONDS
)
