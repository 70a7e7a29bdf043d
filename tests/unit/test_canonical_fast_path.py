"""canonical_json writes values without floats through the standard library's C encoder: it must give the
bytes of RFC 8785 (the rfc8785 package) for every value, plain or not. Compared on thousands of generated
values built to hit the places where the two could differ: escapes, control characters, non-ASCII text,
lone surrogates, key order, integers at the edge of I-JSON, nesting, floats and non-ASCII keys (the package's
path)."""

from __future__ import annotations

import random
from typing import Any

import pytest
import rfc8785

from outbox.log.canonical import MAX_SAFE_INTEGER, _plain, canonical_json

# Code points where an encoder could go wrong: controls, quote and backslash, DEL, the line separators
# JavaScript once escaped, private use (sorted apart from astral characters in UTF-16), astral characters.
TRICKY = [*range(0x20), 0x22, 0x2F, 0x5C, 0x7F, 0x80, 0xE9, 0x2028, 0x2029, 0xE000, 0xFFFD, 0xFFFF, 0x1F600, 0x10FFFF]


def text(rng: random.Random, ascii_only: bool = False) -> str:
    size = rng.randint(0, 12)
    if ascii_only:
        return "".join(chr(rng.randint(0x20, 0x7E)) for _ in range(size))
    return "".join(chr(rng.choice(TRICKY) if rng.random() < 0.5 else rng.randint(0x20, 0x7E)) for _ in range(size))


def value(rng: random.Random, depth: int = 0, floats: bool = False) -> Any:
    kinds = ["str", "int", "bool", "none"] + (["dict", "list"] * 2 if depth < 5 else [])
    kinds += ["float"] if floats else []
    kind = rng.choice(kinds)
    if kind == "str":
        return text(rng)
    if kind == "int":
        return rng.choice([0, -1, 1, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, rng.randint(-(10**12), 10**12)])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    if kind == "float":
        return rng.choice([0.5, -0.0, 1e21, 1e-7, 3.0, rng.uniform(-1e9, 1e9)])
    if kind == "list":
        return [value(rng, depth + 1, floats) for _ in range(rng.randint(0, 4))]
    return {text(rng, ascii_only=rng.random() < 0.9): value(rng, depth + 1, floats) for _ in range(rng.randint(0, 5))}


def reference(item: Any) -> bytes | type[Exception]:
    try:
        return bytes(rfc8785.dumps(item))
    except Exception as exc:  # the same error type is expected from canonical_json
        return type(exc)


def ours(item: Any) -> bytes | type[Exception]:
    try:
        return canonical_json(item)
    except Exception as exc:
        return type(exc)


@pytest.mark.parametrize("floats", [False, True], ids=["without-floats", "with-floats"])
def test_canonical_json_writes_the_bytes_of_rfc_8785_for_every_generated_value(floats: bool) -> None:
    rng = random.Random(f"canonical:{floats}")
    plain = 0
    for _ in range(4000):
        item = {"payload": value(rng, floats=floats), "id": text(rng, ascii_only=True)}
        plain += _plain(item, 40)
        assert ours(item) == reference(item), item
    assert plain > 1000, "the generator must reach the fast path often, or the comparison proves nothing"


@pytest.mark.parametrize(
    "item",
    [
        {"b": 1, "a": 2, "A": 3, "_": 4, "a1": 5},  # key order
        {"s": "\u2028\u2029\ue000\U0001f600"},
        {"s": "".join(map(chr, range(0x20)))},
        {"n": MAX_SAFE_INTEGER + 1},  # past I-JSON: the package's error
        {"s": "\ud800"},  # a lone surrogate: the package's answer
        {"é": 1, "z": 2},  # a non-ASCII key: the package's order
        {"f": 1.0, "g": 1e21, "h": 1e-7},
        [[[[[]]]]],
    ],
)
def test_the_edges_are_written_as_rfc_8785_writes_them(item: Any) -> None:
    assert ours(item) == reference(item)
