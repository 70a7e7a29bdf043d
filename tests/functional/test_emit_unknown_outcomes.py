"""emit() when DynamoDB's answer does not say whether the transaction applied (an HTTP 500, a transaction
still in progress, a lost response): it re-sends the same request with the same ClientRequestToken until
the answer is definite, so the event and the caller's writes commit once, even when another writer moves
the tenant's head in between."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from outbox import Envelope, EventStore, EventStoreUnavailableError, writes
from outbox.local.clock import VirtualClock
from tests.functional.conftest import EVENTS_TABLE, ORDERS_TABLE

TENANT = "acme"
ACCOUNT_KEY = {"pk": "ACCOUNT#a-1", "sk": "META"}


def dynamodb_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "injected"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "TransactWriteItems",
    )


# What one TransactWriteItems call does: when the request applies in DynamoDB (moto) ("now", "later":
# right before the next call, as a transaction still in progress; "never"), and what the caller is told
# instead of DynamoDB's answer (None: the real answer).
STEPS: dict[str, tuple[str, Callable[[], Exception] | None]] = {
    "answer": ("now", None),
    "commit, then 500": ("now", lambda: dynamodb_error("InternalServerError", 500)),
    "500": ("never", lambda: dynamodb_error("InternalServerError", 500)),
    "commit, then in progress": ("now", lambda: dynamodb_error("TransactionInProgressException", 400)),
    "in progress, commit later": ("later", lambda: dynamodb_error("TransactionInProgressException", 400)),
    "commit, then read timeout": ("now", lambda: ReadTimeoutError(endpoint_url="https://dynamodb.test")),
    "throttle": ("never", lambda: dynamodb_error("ProvisionedThroughputExceededException", 400)),
    "parameter mismatch": ("never", lambda: dynamodb_error("IdempotentParameterMismatchException", 400)),
    "access denied": ("never", lambda: dynamodb_error("AccessDeniedException", 400)),
}


class AmbiguousClient:
    """The DynamoDB client, with emit's transactions following a script of ``STEPS`` (then ``"answer"``),
    ``before[n]`` run right before the n-th transaction (1-based), and every request recorded."""

    def __init__(
        self,
        client: Any,
        script: list[str],
        before: dict[int, Callable[[], object]] | None = None,
        each_call: Callable[[], object] = lambda: None,
    ) -> None:
        self._client = client
        self._script = script
        self._before = before or {}
        self._each_call = each_call
        self.requests: list[dict[str, Any]] = []
        self._in_progress: list[dict[str, Any]] = []

    def transact_write_items(self, **request: Any) -> Any:
        for earlier in self._in_progress:
            self._client.transact_write_items(**earlier)
        self._in_progress.clear()
        self.requests.append(request)
        call = len(self.requests)
        if call in self._before:
            self._before[call]()
        applies, error = STEPS[self._script[call - 1] if call <= len(self._script) else "answer"]
        response = self._client.transact_write_items(**request) if applies == "now" else None
        if applies == "later":
            self._in_progress.append(request)
        self._each_call()
        if error is not None:
            raise error()
        return response

    @property
    def tokens(self) -> list[str]:
        return [request["ClientRequestToken"] for request in self.requests]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class SdkResends500s:
    """What botocore does with a 500 on its own: it re-sends, and the caller sees only the last answer (here a
    throttle), never the 500 of the send before it."""

    def __init__(self, client: AmbiguousClient) -> None:
        self._client = client

    def transact_write_items(self, **request: Any) -> Any:
        try:
            return self._client.transact_write_items(**request)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "InternalServerError":
                raise
            raise dynamodb_error("ProvisionedThroughputExceededException", 400) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.fixture
def rival(dynamodb: Any) -> EventStore:
    """Another writer of the same tenant, which has one event and an account with balance 0."""
    rival = EventStore(EVENTS_TABLE, client=dynamodb, unchecked=True)
    rival.emit("account.opened", {"account": "a-1"}, tenant=TENANT, actor="rival")
    dynamodb.put_item(TableName=ORDERS_TABLE, Item=writes.typed({**ACCOUNT_KEY, "balance": 0}))
    return rival


def rival_emits(rival: EventStore) -> Callable[[], object]:
    return lambda: rival.emit("account.audited", {"account": "a-1"}, tenant=TENANT, actor="rival")


def deposit(store: EventStore) -> Envelope:
    return store.emit(
        "account.credited",
        {"account": "a-1", "amount": 10},
        tenant=TENANT,
        actor="user:42",
        extra_writes=[writes.update(ORDERS_TABLE, ACCOUNT_KEY, "ADD balance :ten", values={":ten": 10})],
    )


def balance(dynamodb: Any) -> int:
    item = dynamodb.get_item(TableName=ORDERS_TABLE, Key=writes.typed(ACCOUNT_KEY))["Item"]
    return int(item["balance"]["N"])


def rows_of(store: EventStore, event_id: str) -> list[Envelope]:
    return [envelope for envelope in store.events(TENANT) if envelope.id == event_id]


def assert_committed_once(rival: EventStore, dynamodb: Any, envelope: Envelope) -> None:
    assert rows_of(rival, envelope.id) == [envelope], "one event row, at the seq emit returned"
    assert balance(dynamodb) == 10, "the caller's ADD applied once"
    assert rival.verify_chain(TENANT).intact


@pytest.mark.parametrize("lost_answer", ["commit, then 500", "commit, then in progress", "in progress, commit later"])
def test_a_commit_answered_as_unknown_is_not_committed_again_after_a_rival_moved_the_head(
    dynamodb: Any, rival: EventStore, lost_answer: str
) -> None:
    # Given a transaction answered with a 500 or "in progress" that commits (before that answer, or after
    # it, as a transaction still in progress does), and a rival that commits the tenant's next event
    # before the retry
    client = AmbiguousClient(dynamodb, [lost_answer], before={2: rival_emits(rival)})
    store = EventStore(EVENTS_TABLE, client=client, sleep=lambda _s: None, unchecked=True)

    # When the caller emits
    envelope = deposit(store)

    # Then the retry re-sends the same token, and the event and the deposit are committed once, at seq 2
    assert envelope.seq == 2
    assert client.tokens == [client.tokens[0]] * 2
    assert_committed_once(rival, dynamodb, envelope)
    assert [e.seq for e in rival.events(TENANT)] == [1, 2, 3]


def test_a_lost_response_then_a_throttle_keeps_the_token_and_commits_once(dynamodb: Any, rival: EventStore) -> None:
    # Given a transaction that commits but whose response times out, a retry that is throttled (which
    # says nothing about the first send), and a rival that commits the tenant's next event meanwhile
    client = AmbiguousClient(dynamodb, ["commit, then read timeout", "throttle"], before={3: rival_emits(rival)})
    store = EventStore(EVENTS_TABLE, client=client, sleep=lambda _s: None, unchecked=True)

    # When the caller emits
    envelope = deposit(store)

    # Then every retry carried the first token, and the event and the deposit are committed once
    assert client.tokens == [client.tokens[0]] * 3
    assert envelope.seq == 2
    assert_committed_once(rival, dynamodb, envelope)


def test_a_commit_the_sdk_hid_behind_a_throttle_is_found_with_the_token_and_committed_once(
    dynamodb: Any, rival: EventStore
) -> None:
    # Given a transaction that commits but whose answer is lost, which the SDK's own retry re-sends and sees
    # throttled (so the caller's first answer is a throttle), and a rival that commits the next event meanwhile
    client = AmbiguousClient(dynamodb, ["commit, then 500"], before={2: rival_emits(rival)})
    store = EventStore(EVENTS_TABLE, client=SdkResends500s(client), sleep=lambda _s: None, unchecked=True)

    # When the caller emits
    envelope = deposit(store)

    # Then the retry after the throttle carried the first token, and DynamoDB answered it with the commit
    assert client.tokens == [client.tokens[0]] * 2
    assert envelope.seq == 2
    assert_committed_once(rival, dynamodb, envelope)


def test_an_unknown_outcome_that_did_not_commit_is_resealed_after_the_rival_and_committed_once(
    dynamodb: Any, rival: EventStore
) -> None:
    # Given a first send answered with a 500 that did not commit, and a rival that commits seq 2 before
    # the retry
    client = AmbiguousClient(dynamodb, ["500"], before={2: rival_emits(rival)})
    store = EventStore(EVENTS_TABLE, client=client, sleep=lambda _s: None, unchecked=True)

    # When the caller emits
    envelope = deposit(store)

    # Then the same request is re-sent first; its cancellation on the head proves the first send did not
    # commit, so the event is re-sealed after the rival's with a new token and commits once, at seq 3
    assert client.requests[1] == client.requests[0]
    assert client.tokens[2] != client.tokens[0]
    assert len(client.requests) == 3
    assert envelope.seq == 3
    assert_committed_once(rival, dynamodb, envelope)


def test_unknown_outcomes_past_the_idempotency_window_raise_may_have_committed_and_double_nothing(
    dynamodb: Any, rival: EventStore, clock: VirtualClock
) -> None:
    # Given a transaction that commits, then answers that each take a minute and never arrive, and a rival
    # that commits the tenant's next event meanwhile; DynamoDB remembers a token for ten minutes
    client = AmbiguousClient(
        dynamodb,
        ["commit, then read timeout"] * 30,
        before={2: rival_emits(rival)},
        each_call=lambda: clock.advance(60),
    )
    store = EventStore(
        EVENTS_TABLE, client=client, clock=clock.now_ms, sleep=clock.sleep, max_transient_retries=30, unchecked=True
    )
    started = clock()

    # When the caller emits
    with pytest.raises(EventStoreUnavailableError) as raised:
        deposit(store)

    # Then emit gives up before the token expires, says the event may have committed and how to check,
    # and never re-sealed the event
    event_id = client.tokens[0].rsplit("-", 1)[0]
    assert raised.value.committed is None
    assert event_id in str(raised.value)
    assert "may have committed" in str(raised.value)
    assert set(client.tokens) == {client.tokens[0]}
    assert clock() - started < timedelta(minutes=10)
    [committed] = rows_of(rival, event_id)
    assert committed.seq == 2
    assert balance(dynamodb) == 10
    assert rival.verify_chain(TENANT).intact


def test_unknown_outcomes_until_the_retries_run_out_raise_with_committed_unknown(
    dynamodb: Any, rival: EventStore
) -> None:
    # Given DynamoDB answering every send with a 500
    client = AmbiguousClient(dynamodb, ["500"] * 10)
    store = EventStore(EVENTS_TABLE, client=client, sleep=lambda _s: None, max_transient_retries=3, unchecked=True)

    # When the caller emits
    with pytest.raises(EventStoreUnavailableError) as raised:
        deposit(store)

    # Then the caller is told the outcome is unknown, with the event id to look for
    assert raised.value.committed is None
    assert client.tokens[0].rsplit("-", 1)[0] in str(raised.value)
    assert set(client.tokens) == {client.tokens[0]}


def test_an_idempotent_parameter_mismatch_is_reported_as_a_bug_with_committed_unknown(
    dynamodb: Any, rival: EventStore
) -> None:
    # Given a commit answered with a 500, and its re-send refused as "same token, other parameters"
    client = AmbiguousClient(dynamodb, ["commit, then 500", "parameter mismatch"])
    store = EventStore(EVENTS_TABLE, client=client, sleep=lambda _s: None, unchecked=True)

    # When the caller emits
    with pytest.raises(EventStoreUnavailableError) as raised:
        deposit(store)

    # Then the error says the outcome is unknown and that this is a bug, and nothing was doubled
    assert raised.value.committed is None
    assert "bug" in str(raised.value)
    assert balance(dynamodb) == 10


def test_an_error_answer_to_a_re_sent_token_reports_the_outcome_as_unknown(dynamodb: Any, rival: EventStore) -> None:
    # Given a commit answered with a 500, and its re-send refused for a reason that says nothing about it
    client = AmbiguousClient(dynamodb, ["commit, then 500", "access denied"])
    store = EventStore(EVENTS_TABLE, client=client, sleep=lambda _s: None, unchecked=True)

    # When the caller emits
    with pytest.raises(EventStoreUnavailableError) as raised:
        deposit(store)

    # Then the caller is not told "nothing was committed": the first send did commit
    assert raised.value.committed is None
    assert balance(dynamodb) == 10
