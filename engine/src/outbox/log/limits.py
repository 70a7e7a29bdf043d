"""What a TransactWriteItems may hold, checked before any call to AWS."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from outbox.exceptions import InvalidWriteError
from outbox.keys import OWN_TRANSACTION_ITEMS

MAX_TRANSACT_ITEMS = 100
MAX_ITEM_BYTES = 400 * 1024
MAX_TRANSACTION_BYTES = 4 * 1024 * 1024
ACTIONS = ("Put", "Update", "Delete", "ConditionCheck")
TYPE_TAGS = frozenset({"S", "N", "B", "SS", "NS", "BS", "M", "L", "NULL", "BOOL"})
# The key attributes assumed for a table that is not named in ``table_keys``: this project's convention.
DEFAULT_KEY_ATTRIBUTES = ("pk", "sk")


@dataclass(frozen=True)
class WriteTarget:
    """One action of a transaction: which item it touches and how many bytes it weighs."""

    label: str
    action: str
    table_name: str
    key: dict[str, Any]
    size: int

    @property
    def identity(self) -> tuple[str, str]:
        return self.table_name, repr(sorted(self.key.items()))


def attribute_value_size(value: Mapping[str, Any]) -> int:
    """Size of one typed attribute value by DynamoDB's published rules (numbers rounded up)."""
    (tag, inner), *_ = value.items()
    if tag == "S":
        return len(inner.encode("utf-8"))
    if tag == "N":
        return _number_size(inner)
    if tag == "B":
        return len(inner)
    if tag in ("NULL", "BOOL"):
        return 1
    if tag == "SS":
        return sum(len(item.encode("utf-8")) for item in inner)
    if tag == "NS":
        return sum(_number_size(item) for item in inner)
    if tag == "BS":
        return sum(len(item) for item in inner)
    if tag == "L":
        return 3 + sum(1 + attribute_value_size(item) for item in inner)
    if tag == "M":
        return 3 + sum(1 + len(name.encode("utf-8")) + attribute_value_size(item) for name, item in inner.items())
    raise InvalidWriteError(f"unknown DynamoDB type tag {tag!r}")


def _number_size(text: str) -> int:
    digits = text.lstrip("-").split("e")[0].split("E")[0].replace(".", "").strip("0") or "0"
    return min(21, (len(digits) + 1) // 2 + 1)


def item_size(item: Mapping[str, Any]) -> int:
    return sum(len(name.encode("utf-8")) + attribute_value_size(value) for name, value in item.items())


def _check_typed(where: str, attributes: Any) -> None:
    if not isinstance(attributes, Mapping) or not attributes:
        raise InvalidWriteError(f"{where} must be a non-empty map of typed attribute values")
    for name, value in attributes.items():
        if not (isinstance(value, Mapping) and len(value) == 1 and next(iter(value)) in TYPE_TAGS):
            raise InvalidWriteError(
                f"{where}[{name!r}] = {value!r} is not typed DynamoDB JSON such as {{'S': 'x'}}; build "
                "writes with outbox.log.writes or boto3's TypeSerializer"
            )


def describe_write(
    index: int, write: Any, key_attributes: Mapping[str, Sequence[str]], forbidden_table: str
) -> WriteTarget:
    """Check one caller write and say what it targets; every message names ``extra_writes[index]``."""
    where = f"extra_writes[{index}]"
    if not isinstance(write, Mapping) or len(write) != 1 or next(iter(write)) not in ACTIONS:
        raise InvalidWriteError(f"{where} must be a map with exactly one of {', '.join(ACTIONS)}")
    action, body = next(iter(write.items()))
    if not isinstance(body, Mapping) or not isinstance(body.get("TableName"), str) or not body["TableName"]:
        raise InvalidWriteError(f"{where}.{action} needs a TableName")
    table_name = body["TableName"]
    if table_name == forbidden_table:
        raise InvalidWriteError(f"{where} writes the events table {table_name!r}; only emit() writes it")
    if action == "Put":
        _check_typed(f"{where}.Put.Item", body.get("Item"))
        item = body["Item"]
        names = key_attributes.get(table_name, DEFAULT_KEY_ATTRIBUTES)
        key = {name: item[name] for name in names if name in item}
        if not key or (table_name in key_attributes and len(key) != len(names)):
            raise InvalidWriteError(
                f"{where}.Put.Item on {table_name!r} lacks its key attributes {tuple(names)}; "
                "declare the table's key in EventStore(table_keys=...)"
            )
        size = item_size(item)
    else:
        _check_typed(f"{where}.{action}.Key", body.get("Key"))
        key = dict(body["Key"])
        values = body.get("ExpressionAttributeValues") or {}
        size = item_size(key) + item_size(values)
    if action == "Update" and not body.get("UpdateExpression"):
        raise InvalidWriteError(f"{where}.Update needs an UpdateExpression")
    if action == "ConditionCheck" and not body.get("ConditionExpression"):
        raise InvalidWriteError(f"{where}.ConditionCheck needs a ConditionExpression")
    if size > MAX_ITEM_BYTES:
        raise InvalidWriteError(f"{where} is {size} bytes; DynamoDB items are at most {MAX_ITEM_BYTES}")
    return WriteTarget(label=where, action=action, table_name=table_name, key=key, size=size)


def check_transaction(targets: Sequence[WriteTarget], reserved: int = 0, own: int = OWN_TRANSACTION_ITEMS) -> None:
    """The limits DynamoDB enforces on the whole transaction, with a message that says which one.
    ``reserved`` counts actions the caller will add that are not in ``targets``; ``own`` is how many of all
    of them emit() needs itself (the head, the event rows, the tenant's index row)."""
    if len(targets) + reserved > MAX_TRANSACT_ITEMS:
        raise InvalidWriteError(
            f"the transaction would hold {len(targets) + reserved} actions; DynamoDB allows {MAX_TRANSACT_ITEMS} "
            f"and emit() needs {own} of them, so pass at most {MAX_TRANSACT_ITEMS - own} extra_writes "
            "(INLINE subscribers' writes included)"
        )
    seen: dict[tuple[str, str], WriteTarget] = {}
    for target in targets:
        first = seen.setdefault(target.identity, target)
        if first is not target:
            raise InvalidWriteError(
                f"{first.label} and {target.label} target the same item ({target.table_name!r} "
                f"{target.key!r}); DynamoDB allows one action per item in a transaction"
            )
    total = sum(target.size for target in targets)
    if total > MAX_TRANSACTION_BYTES:
        raise InvalidWriteError(f"the transaction is {total} bytes; DynamoDB allows {MAX_TRANSACTION_BYTES}")
