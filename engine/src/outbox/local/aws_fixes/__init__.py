"""Where the local runtime departs from moto 5.2.5 to behave like AWS, each rule a named patch.

Every place where moto differs from AWS that the runtime depends on (the M rules of docs/aws-behaviour.md)
has its patch here, on moto's model and response classes, so the fixes hold for
in-process ``mock_aws`` and for a ``ThreadedMotoServer`` in the same process alike:

=====  ===========================================================  ==================================
Rule   AWS behaviour                                                moto gap / rule in docs/aws-behaviour.md
=====  ===========================================================  ==================================
1      TransactWriteItems atomic (conditions first, then writes),   M1, M7-M10; R8.1, R8.3
       O(items) not O(table), 4 MB limit, one lock per request      (``dynamodb``)
2      ClientRequestToken idempotent for 10 minutes                 M6; R8.2 (``dynamodb``)
3      No stream record for a write that changes nothing            M3; R7.2 (``dynamodb``)
4      One INSERT for an item created by UpdateItem                 M4 (``dynamodb``)
5      ApproximateCreationDateTime rounded down to the second       M5; R7.3 (``dynamodb``)
6      FIFO five-minute deduplication window survives deletion      M14; R5.1 (``sqs``)
7      DLQ move: dedup id = message id, DeadLetterQueueSourceArn    M17; R5.4 (``sqs``)
8      Visibility, delays, retention on the virtual clock           M19, M15 (``sqs``)
9      StartMessageMoveTask / ListMessageMoveTasks / Cancel…        M18; R5.6 (``sqs``)
10     ChangeMessageVisibility: 12 h from the receive, 0 always     M20; R5.5 (``sqs``)
11     TTL deletes expired items (a later sweep, REMOVE record      moto never expires an item (``ttl``:
       by the Service ``dynamodb.amazonaws.com``)                   a function, not a patch)
12     Message size in bytes: UTF-8 body plus attributes            M21 (``sqs``)
13     A stopped pipe stays STOPPED until StartPipe                 M24; R11.1 (``pipes``)
-      ReceiveRequestAttemptId                                      M16; R5.3 (``sqs``)
-      (speed, no behaviour) UpdateItem's expression parsed once    moto redoes both on every call
       per text, a response member's names found once per shape    (``speed``)
=====  ===========================================================  ==================================

Nothing is patched at import. ``install`` applies the patches and returns the function that removes
them; per-queue and per-table state lives beside moto's own objects, so ``mock_aws`` resets it too.
Rule 11 is no patch: AWS sweeps expired items at a time of its choosing, so the sweep runs only when
called (``ttl.sweep_expired_items``, which ``LocalRuntime.sweep_expired_items`` calls on its stack).

Example
-------
>>> from moto import mock_aws
>>> from outbox.local.clock import VirtualClock
>>> clock = VirtualClock()
>>> with mock_aws():
...     uninstall = install(clock)
...     try:
...         pass  # boto3 calls see AWS's behaviour, on the virtual clock
...     finally:
...         uninstall()
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from outbox.local.aws_fixes._patching import Clock, PatchSet
from outbox.local.aws_fixes.dynamodb import DYNAMODB_LOCK, DynamoDBFixes
from outbox.local.aws_fixes.pipes import PipesFixes
from outbox.local.aws_fixes.speed import SpeedFixes
from outbox.local.aws_fixes.sqs import SqsFixes
from outbox.local.aws_fixes.sqs_messages import SQS_LOCK
from outbox.local.clock import VirtualClock

__all__ = ["DYNAMODB_LOCK", "SQS_LOCK", "install", "installed", "kept_state", "restore_kept_state"]

_state_lock = threading.Lock()
_active: tuple[Clock, PatchSet, Callable[[], None]] | None = None
# The fixes that keep state of their own beside moto's objects, while installed.
_keeping: tuple[DynamoDBFixes, SqsFixes] | None = None


def install(clock: VirtualClock) -> Callable[[], None]:
    """Make moto behave like AWS (rules 1 to 10, 12 and 13) on ``clock``; return the function that undoes it.

    Idempotent: while installed, a second call only rebinds the clock and returns the same uninstall
    function. Uninstalling twice is harmless.
    """
    global _active, _keeping
    with _state_lock:
        if _active is not None:
            bound, _, uninstall = _active
            bound.clock = clock
            return uninstall
        bound = Clock(clock)
        dynamodb, sqs = DynamoDBFixes(bound), SqsFixes(bound)
        patches = PatchSet(
            [
                *dynamodb.patches(),
                *sqs.patches(),
                *PipesFixes().patches(),
                *SpeedFixes().patches(),
            ]
        )
        patches.apply()

        def uninstall() -> None:
            global _active, _keeping
            with _state_lock:
                if _active is None or _active[1] is not patches:
                    return
                patches.undo()
                _active = _keeping = None

        _active, _keeping = (bound, patches, uninstall), (dynamodb, sqs)
        return uninstall


def installed() -> bool:
    """Whether the fixes are in place (for a runtime that must not install them twice)."""
    return _active is not None


def kept_state() -> dict[str, Any]:
    """What the installed fixes keep beside moto's objects (FIFO dedup windows, receive attempts, move tasks,
    ClientRequestTokens), keyed by those objects: to be pickled in one go with moto's backends, so that
    ``restore_kept_state`` finds them again on the restored objects (a served runtime's saved state)."""
    if _keeping is None:
        raise RuntimeError("the fixes are not installed")
    dynamodb, sqs = _keeping
    return {"dynamodb": dynamodb.kept(), "sqs": sqs.kept()}


def restore_kept_state(kept: dict[str, Any]) -> None:
    """Put back what ``kept_state`` returned, unpickled with the backends it is keyed by."""
    if _keeping is None:
        raise RuntimeError("the fixes are not installed")
    dynamodb, sqs = _keeping
    dynamodb.restore(kept["dynamodb"])
    sqs.restore(kept["sqs"])
