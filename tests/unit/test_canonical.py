"""Canonical JSON and the chain hash against fixed vectors: if these change, every stored chain breaks."""

from __future__ import annotations

import hashlib
from decimal import Decimal

import pytest

from outbox.log.canonical import (
    GENESIS_HASH,
    canonical_json,
    chain_hash,
    from_dynamodb_numbers,
    json_problem,
    to_dynamodb_numbers,
)


def test_canonical_json_sorts_keys_and_writes_numbers_the_rfc_8785_way() -> None:
    assert canonical_json({"b": 1.0, "a": [1e21, 0.1, -0.0], "c": "é"}) == (b'{"a":[1e+21,0.1,0],"b":1,"c":"\xc3\xa9"}')


def test_chain_hash_is_sha256_of_prev_hash_then_canonical_body() -> None:
    body = {"z": None, "a": {"y": [True, False], "x": 2}}
    expected = hashlib.sha256(GENESIS_HASH.encode() + b'{"a":{"x":2,"y":[true,false]},"z":null}').hexdigest()
    assert chain_hash(GENESIS_HASH, body) == expected
    # Pinned: a change to the scheme (separator, encoding, genesis) must be a deliberate migration.
    assert expected == "74a9055c43c3d0701c78718bd72631dbbe4a2614f305547742001fa1f5fea29e"


@pytest.mark.parametrize(
    "value",
    [0, 1, -7, 2**53 - 1, 0.1, 1.5e300, -2.5, 1e-7, 3.0, {"n": [1.25, {"m": 10}]}],
)
def test_numbers_survive_the_dynamodb_round_trip_with_the_same_canonical_bytes(value: object) -> None:
    stored = to_dynamodb_numbers(value)
    assert canonical_json(from_dynamodb_numbers(stored)) == canonical_json(value)


def test_floats_become_exact_decimals_and_integral_decimals_become_ints() -> None:
    assert to_dynamodb_numbers(0.1) == Decimal("0.1")
    assert to_dynamodb_numbers(True) is True
    assert from_dynamodb_numbers(Decimal("3")) == 3
    assert isinstance(from_dynamodb_numbers(Decimal("3")), int)
    assert from_dynamodb_numbers(Decimal("1E+300")) == 1e300


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ({"when": object()}, "payload.when is a object"),
        ({1: "x"}, "non-string key"),
        ({"": 1}, "empty key"),
        ({"big": 2**53}, "outside"),
        ({"s": {1, 2}}, "payload.s is a set"),
        ({"b": b"bytes"}, "payload.b is a bytes"),
    ],
)
def test_json_problem_names_the_offending_path(payload: dict[object, object], fragment: str) -> None:
    problem = json_problem(payload)
    assert problem is not None
    assert fragment in problem


def test_json_problem_rejects_nesting_deeper_than_dynamodb_allows() -> None:
    deep: dict[str, object] = {}
    node = deep
    for _ in range(40):
        node["d"] = {}
        node = node["d"]  # type: ignore[assignment]
    assert "nests deeper" in (json_problem(deep) or "")
    assert json_problem({"a": [1, {"b": None}], "c": True}) is None


@pytest.mark.parametrize("value", [0.0, -0.0, 1e-130, -1e-130, 9.999999999999998e125, -9.999999999999998e125, 0.1])
def test_floats_at_dynamodb_s_number_bounds_are_accepted(value: float) -> None:
    assert json_problem({"x": value}) is None


@pytest.mark.parametrize("value", [1e126, -1e126, 1e-131, 5e-324, 1e300, 1.7976931348623157e308])
def test_floats_past_dynamodb_s_number_bounds_are_refused_with_the_path(value: float) -> None:
    problem = json_problem({"x": value})

    assert problem is not None
    assert problem.startswith("payload.x is ")
    assert "DynamoDB's number range" in problem
