"""The consumer reads each message's typed image with ``plain_value``, one pass for the types an event row
holds; it must return what boto3's TypeDeserializer followed by ``from_dynamodb_numbers`` returns, for every
input, hostile ones included (the same value, or the same exception type)."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import Binary, TypeDeserializer

from outbox.log.canonical import from_dynamodb_numbers
from outbox.log.envelope import plain_value

NUMBERS = [
    "0",
    "-0",
    "1",
    "-17",
    "3.5",
    "1e3",
    "1E-130",
    "9007199254740991",
    "9007199254740993",
    "1.0",
    "12345678901234567890123456789012345678",
    "123456789012345678901234567890123456789",
    "NaN",
    "abc",
    "",
]


def typed(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.choice(["S", "N", "BOOL", "NULL", "M", "L", "odd"] if depth < 4 else ["S", "N", "BOOL", "odd"])
    if kind == "S":
        return {"S": rng.choice(["", "a", "é\u2028", 5, None])}
    if kind == "N":
        return {"N": rng.choice(NUMBERS)}
    if kind == "BOOL":
        return {"BOOL": rng.choice([True, False, "yes"])}
    if kind == "NULL":
        return {"NULL": rng.choice([True, False])}
    if kind == "M":
        inner = {f"k{i}": typed(rng, depth + 1) for i in range(rng.randint(0, 3))}
        return {"M": inner if rng.random() < 0.9 else "not a map"}
    if kind == "L":
        inner = [typed(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        return {"L": inner if rng.random() < 0.9 else "xy"}
    return rng.choice(
        [
            {},
            "S",
            3,
            None,
            {"S": "a", "N": "1"},
            {"X": 1},
            {"B": b"\x00\xff"},
            {"SS": ["a", "b"]},
            {"NS": ["1", "2.5"]},
            {"BS": [b"a"]},
            {"M": {"x": {"S": "y"}, "n": {"N": "2"}}},
        ]
    )


def reference(value: Any) -> Any:
    try:
        return from_dynamodb_numbers(TypeDeserializer().deserialize(value))
    except Exception as exc:
        return type(exc)


def ours(value: Any) -> Any:
    try:
        return plain_value(value)
    except Exception as exc:
        return type(exc)


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 and 1.0 and True are equal in Python)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and a != a:
        return b != b
    return bool(a == b)


def test_plain_value_returns_what_the_deserializer_and_the_number_conversion_return() -> None:
    rng = random.Random("plain-value")
    for _ in range(5000):
        value = typed(rng)
        assert same(ours(value), reference(value)), value


def test_the_types_an_event_row_never_holds_come_back_as_boto3_makes_them() -> None:
    assert plain_value({"B": b"\x00"}) == Binary(b"\x00")
    assert plain_value({"NS": ["1", "2.5"]}) == {Decimal("1"), Decimal("2.5")}
    assert plain_value({"M": {"n": {"N": "2"}, "f": {"N": "2.5"}}}) == {"n": 2, "f": 2.5}
