"""Where moto 5.2.5 repeats the same work on every call, done once (speed only: no behaviour changes).

**UpdateItem's expression, parsed once per text.** moto spends most of an ``UpdateItem`` on its expression,
every call: it parses the text twice (its response layer, then its model), deep-copies the tree for its
validator, and runs ten passes over the copy, three of which read nothing but the tree, the attribute names
and the table's keys (one of them, the count of SET clauses, is quadratic in the number of actions). The
engine's claims and completions send the same few expressions for every message, so the local runtime, its
tests, ``make demo`` and the benchmarks spent most of their DynamoDB time re-parsing them (the claim's
expression: 11.3 ms of CPU per UpdateItem before, 6.1 after). Here:

- ``UpdateExpressionParser.make`` keeps each text's tree (an invalid text still raises on every call, since
  nothing is kept for it). Every caller in moto only reads that tree or hands it to the validator.
- The validator's copy is unpickled from the tree's pickled bytes instead of ``deepcopy`` (about eight times
  faster; the passes rewrite the copy, never the kept tree).
- The three passes that depend only on the text, the names and the table's keys run until they pass once
  for that combination; a later call with the same three skips them, since they would pass again. The
  passes that read the item or the values (resolving paths, evaluating functions, type checks) run every
  time, so every error moto raises, it still raises.

A text is kept only while fewer than ``MAX_KEPT`` are: past that, moto parses as it always did.

**A response member's candidate names, worked out once per shape.** moto's response serializer finds each
member of each response object by trying the names its alias providers offer, and it asks every provider
again for every member of every value (every attribute of every item a query returns). What the providers
answer depends only on the member's name, its shape and the shape's parent structure, and the class of the
object it is read from (its ``Meta`` aliases, its class name), so the list is kept for that combination; the
value itself is still read from each object, in the same order of names.

**A queue's attribute names, converted once.** moto's SQS builds a queue's attributes (on every send, for
its size check, and every GetQueueAttributes) by converting each attribute's name from CamelCase with a
handful of regular expressions; the conversion is a pure function of the name, so it is kept per name.
"""

from __future__ import annotations

import copy
import functools
import pickle
import threading
from dataclasses import dataclass, field
from typing import Any

from moto.core import utils as moto_utils
from moto.core.serialize import AttributePickerContext, XFormedAttributePicker
from moto.dynamodb.parsing import validators
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
from moto.dynamodb.parsing.validators import (
    ActionCountValidator,
    OverlappingPathsValidator,
    UpdateExpressionValidator,
    UpdateHashRangeKeyValidator,
)
from moto.sqs import models as sqs_models

from outbox.local.aws_fixes._patching import Patch

MAX_KEPT = 1024
MAX_NAME_LISTS = 100_000
# The passes whose verdict depends on nothing but the tree, the attribute names and the table's keys.
TEXT_ONLY_PASSES = (ActionCountValidator, OverlappingPathsValidator, UpdateHashRangeKeyValidator)

_CheckedFor = tuple[tuple[tuple[str, str], ...], tuple[str, ...]]


@dataclass
class _Kept:
    """One text's tree, its pickled bytes (``None`` if it does not pickle), and what its passes accepted."""

    tree: Any
    frozen: bytes | None
    checked: set[_CheckedFor] = field(default_factory=set)


class ExpressionCache:
    """The kept trees, by text and by the identity of the tree (what the validator is handed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_text: dict[str, _Kept] = {}
        self._by_tree: dict[int, _Kept] = {}

    def parse(self, parse: Any, text: str) -> Any:
        kept = self._by_text.get(text)
        if kept is not None:
            return kept.tree
        tree = parse(text)
        with self._lock:
            if text not in self._by_text and len(self._by_text) < MAX_KEPT:
                kept = _Kept(tree, _frozen(tree))
                self._by_text[text] = kept
                self._by_tree[id(tree)] = kept
        return tree

    def kept(self, tree: Any) -> _Kept | None:
        kept = self._by_tree.get(id(tree))
        return kept if kept is not None and kept.tree is tree else None


def _frozen(tree: Any) -> bytes | None:
    try:
        return pickle.dumps(tree, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return None


def _checked_for(validator: UpdateExpressionValidator) -> _CheckedFor:
    names = validator.expression_attribute_names or {}
    return tuple(sorted(names.items())), tuple(validator.table.table_key_attrs)


class SpeedFixes:
    """The patches, over caches that outlive ``mock_aws``'s resets (a tree stays valid for its text, a list
    of names for its shape)."""

    def __init__(self) -> None:
        self.cache = ExpressionCache()
        self.names: dict[tuple[Any, ...], tuple[str, ...]] = {}

    def patches(self) -> list[Patch]:
        converted = functools.lru_cache(maxsize=4096)(moto_utils.camelcase_to_underscores)
        return [
            *self._expression_patches(),
            *self._serializer_patches(),
            Patch(sqs_models, "camelcase_to_underscores", converted, rule="speed"),
        ]

    def _serializer_patches(self) -> list[Patch]:
        names = self.names
        original = XFormedAttributePicker.get_possible_keys

        def get_possible_keys(self: XFormedAttributePicker, context: AttributePickerContext) -> Any:
            shape = context.shape
            # The objects themselves, not their ids, so that none is collected and its id reused.
            key = (type(context.obj), context.key, shape, getattr(shape, "parent", None), tuple(self.alias_providers))
            found = names.get(key)
            if found is None:
                found = tuple(original(self, context))
                if len(names) < MAX_NAME_LISTS:
                    names[key] = found
            return found

        return [Patch(XFormedAttributePicker, "get_possible_keys", get_possible_keys, rule="speed")]

    def _expression_patches(self) -> list[Patch]:
        cache = self.cache
        original_make = UpdateExpressionParser.make.__func__
        original_init = UpdateExpressionValidator.__init__

        def parse(text: str) -> Any:
            return original_make(UpdateExpressionParser, text)

        def make(cls: type, expression_str: str) -> Any:
            return cache.parse(parse, expression_str)

        def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
            kept = cache.kept(value)
            if kept is not None and kept.frozen is not None:
                return pickle.loads(kept.frozen)  # bytes this process pickled from moto's own tree
            return copy.deepcopy(value, memo)

        def init(self: UpdateExpressionValidator, expression: Any, *args: Any, **kwargs: Any) -> None:
            original_init(self, expression, *args, **kwargs)
            self.outbox_kept = cache.kept(expression)  # type: ignore[attr-defined]

        def validate(self: UpdateExpressionValidator) -> Any:
            kept: _Kept | None = getattr(self, "outbox_kept", None)
            checked_for = _checked_for(self) if kept is not None else None
            skip = kept is not None and checked_for in kept.checked
            node = self.node_to_validate
            for processor in self.processors:
                if skip and isinstance(processor, TEXT_ONLY_PASSES):
                    continue
                node = processor.traverse(node)
            # Bounded as the texts are: a text sent with ever new attribute names keeps checking them all.
            if kept is not None and checked_for is not None and len(kept.checked) < MAX_KEPT:
                kept.checked.add(checked_for)
            return node

        return [
            Patch(UpdateExpressionParser, "make", classmethod(make), rule="speed"),
            Patch(validators, "deepcopy", deepcopy, rule="speed"),
            Patch(UpdateExpressionValidator, "__init__", init, rule="speed"),
            Patch(UpdateExpressionValidator, "validate", validate, rule="speed"),
        ]
