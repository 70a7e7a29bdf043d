"""RFC 8785 canonical JSON, the hash chain, and the DynamoDB number round trip that keeps hashes stable."""

from __future__ import annotations

import hashlib
import json
import math
from decimal import Decimal
from typing import Any

# The chain of every tenant starts from this fixed value: sha256 of seq 1 is sha256(GENESIS + body).
GENESIS_HASH = "0" * 64
# I-JSON (RFC 7493) integers: what every JSON parser reads back exactly, and what RFC 8785 accepts.
MAX_SAFE_INTEGER = 2**53 - 1
# DynamoDB allows 32 levels of nesting; the payload map itself is one of them.
MAX_PAYLOAD_DEPTH = 31
# DynamoDB's number range: magnitudes from 1E-130 to 9.9999999999999999999999999999999999999E+125, and
# zero. Precision (38 digits) never binds: a float's shortest repr has at most 17.
DYNAMODB_SMALLEST_MAGNITUDE = Decimal("1E-130")
DYNAMODB_LARGEST_MAGNITUDE = Decimal("9.9999999999999999999999999999999999999E+125")


# For values without floats whose keys are ASCII, RFC 8785 writes what the standard library's C encoder writes
# with sorted keys, no whitespace and no ASCII escaping: the same escapes (\b \t \n \f \r, \" \\, \u00xx in
# lowercase for other control characters, everything else as itself), the same integers, and for ASCII keys
# the same key order (RFC 8785 sorts by UTF-16 code units, Python by code points: they differ only beyond
# ASCII). Anything else (a float, a non-ASCII key, an integer past I-JSON's range, a lone surrogate, a value
# that is not JSON) goes to the rfc8785 package, which also raises what it must. It is imported then, not with
# this module: the events of most applications never need it, and the durable consumer's cold start need not
# pay for it (``make bench``, section 3).
_PLAIN_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False)


def canonical_json(value: Any) -> bytes:
    """RFC 8785 bytes of ``value``; raises ``rfc8785.CanonicalizationError`` for anything not JSON."""
    if _plain(value, MAX_PAYLOAD_DEPTH + 8):
        try:
            return _PLAIN_ENCODER.encode(value).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: the package says what is wrong with it
            pass
    import rfc8785

    return bytes(rfc8785.dumps(value))


def _plain(value: Any, depth: int) -> bool:
    """Whether the C encoder writes ``value`` exactly as RFC 8785 does (see ``_PLAIN_ENCODER``)."""
    if isinstance(value, str) or value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    if depth <= 0:
        return False
    if isinstance(value, dict):
        return all(isinstance(key, str) and key.isascii() and _plain(item, depth - 1) for key, item in value.items())
    if isinstance(value, list):
        return all(_plain(item, depth - 1) for item in value)
    return False


def chain_hash(prev_hash: str, body: dict[str, Any]) -> str:
    """``sha256(prev_hash + canonical_json(body))`` as lowercase hex."""
    digest = hashlib.sha256()
    digest.update(prev_hash.encode("ascii"))
    digest.update(canonical_json(body))
    return digest.hexdigest()


def to_dynamodb_numbers(value: Any) -> Any:
    """Floats become Decimals (boto3 refuses floats); ``repr`` is the shortest exact round trip."""
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {key: to_dynamodb_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [to_dynamodb_numbers(item) for item in value]
    return value


def from_dynamodb_numbers(value: Any) -> Any:
    """Decimals come back as the JSON number they were: an int when integral and safe, else a float.

    RFC 8785 writes 3 and 3.0 the same way, so this choice never changes a hash.
    """
    if isinstance(value, Decimal):
        if value == value.to_integral_value() and abs(value) <= MAX_SAFE_INTEGER:
            return int(value)
        return float(value)
    if isinstance(value, dict):
        return {key: from_dynamodb_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_dynamodb_numbers(item) for item in value]
    return value


def json_problem(value: Any, depth: int = 1, path: str = "payload") -> str | None:
    """Why ``value`` cannot be stored and hashed as a JSON object, or None if it can."""
    if depth > MAX_PAYLOAD_DEPTH:
        return f"{path} nests deeper than DynamoDB's {MAX_PAYLOAD_DEPTH + 1} levels"
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} has a non-string key {key!r}"
            if key == "":
                return f"{path} has an empty key, which DynamoDB maps cannot hold"
            problem = json_problem(item, depth + 1, f"{path}.{key}")
            if problem:
                return problem
        return None
    if isinstance(value, list):
        for index, item in enumerate(value):
            problem = json_problem(item, depth + 1, f"{path}[{index}]")
            if problem:
                return problem
        return None
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            return f"{path} is an integer outside ±(2**53-1), which JSON cannot carry exactly"
        return None
    if isinstance(value, float):
        return _float_problem(value, path)
    return f"{path} is a {type(value).__name__}, not a JSON value"


def _float_problem(value: float, path: str) -> str | None:
    """A float DynamoDB cannot store, compared as the Decimal the row will hold (``to_dynamodb_numbers``)."""
    if not math.isfinite(value):
        return None  # NaN and infinities are caught by the canonicaliser with a precise message
    magnitude = abs(Decimal(repr(value)))
    if magnitude and not DYNAMODB_SMALLEST_MAGNITUDE <= magnitude <= DYNAMODB_LARGEST_MAGNITUDE:
        return (
            f"{path} is {value!r}, outside DynamoDB's number range (a magnitude from 1E-130 to below 1E+126, "
            "or 0); send such a value as a string"
        )
    return None
