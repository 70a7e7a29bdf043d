"""The Pipes filter: every supported operator matches and misses as EventBridge does (docs/aws-behaviour.md R3.3),
and every operator Pipes refuses is refused when the filter compiles (R3.2)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from outbox.local.pipe_filter import UnsupportedFilterError, compile_filter_criteria
from outbox_cdk.relay_pipe import FILTER_PATTERN


def matches(pattern: dict[str, Any] | str, event: dict[str, Any]) -> bool:
    text = pattern if isinstance(pattern, str) else json.dumps(pattern)
    return compile_filter_criteria([text]).matches(event)


def image(**attributes: dict[str, Any]) -> dict[str, Any]:
    return {"dynamodb": {"NewImage": attributes}}


# -- supported operators ------------------------------------------------------------------------------


def test_exact_string_matches_one_of_the_listed_values() -> None:
    pattern = {"eventName": ["INSERT", "MODIFY"]}
    assert matches(pattern, {"eventName": "MODIFY"})
    assert not matches(pattern, {"eventName": "REMOVE"})


def test_exact_match_does_not_fold_case() -> None:
    assert not matches({"kind": ["EVENT"]}, {"kind": "Event"})


def test_exact_number_compares_its_representation() -> None:
    pattern = '{"size": [300]}'
    assert matches(pattern, {"size": 300})
    assert not matches(pattern, {"size": 300.0})  # 300 and 300.0 are not equal (R3.3)
    assert not matches(pattern, {"size": "300"})


def test_null_matches_only_a_present_null() -> None:
    pattern = {"deleted": [None]}
    assert matches(pattern, {"deleted": None})
    assert not matches(pattern, {})
    assert not matches(pattern, {"deleted": ""})


def test_empty_string_matches_only_an_empty_string() -> None:
    pattern = {"note": [""]}
    assert matches(pattern, {"note": ""})
    assert not matches(pattern, {"note": None})
    assert not matches(pattern, {})


def test_prefix() -> None:
    pattern = {"sk": [{"prefix": "TENANT#"}]}
    assert matches(pattern, {"sk": "TENANT#acme"})
    assert not matches(pattern, {"sk": "tenant#acme"})


def test_suffix() -> None:
    pattern = {"file": [{"suffix": ".png"}]}
    assert matches(pattern, {"file": "a.png"})
    assert not matches(pattern, {"file": "a.PNG"})


def test_equals_ignore_case() -> None:
    pattern = {"kind": [{"equals-ignore-case": "event"}]}
    assert matches(pattern, {"kind": "EVENT"})
    assert not matches(pattern, {"kind": "EVENTS"})


def test_prefix_with_equals_ignore_case() -> None:
    pattern = {"sk": [{"prefix": {"equals-ignore-case": "tenant#"}}]}
    assert matches(pattern, {"sk": "TENANT#acme"})
    assert not matches(pattern, {"sk": "HEAD"})


def test_suffix_with_equals_ignore_case() -> None:
    pattern = {"file": [{"suffix": {"equals-ignore-case": ".png"}}]}
    assert matches(pattern, {"file": "A.PNG"})
    assert not matches(pattern, {"file": "a.jpg"})


def test_anything_but_a_string() -> None:
    pattern = {"kind": [{"anything-but": "HEAD"}]}
    assert matches(pattern, {"kind": "EVENT"})
    assert not matches(pattern, {"kind": "HEAD"})
    assert not matches(pattern, {})  # a missing field is not "anything but"


def test_anything_but_a_number() -> None:
    pattern = '{"code": [{"anything-but": 404}]}'
    assert matches(pattern, {"code": 200})
    assert not matches(pattern, {"code": 404})


def test_anything_but_a_list() -> None:
    pattern = {"eventName": [{"anything-but": ["MODIFY", "REMOVE"]}]}
    assert matches(pattern, {"eventName": "INSERT"})
    assert not matches(pattern, {"eventName": "REMOVE"})


def test_exists_true_matches_a_present_leaf_only() -> None:
    pattern = {"dynamodb": {"OldImage": [{"exists": True}]}}
    assert matches(pattern, {"dynamodb": {"OldImage": "x"}})
    assert not matches(pattern, {"dynamodb": {}})
    assert not matches(pattern, {"dynamodb": {"OldImage": {"pk": {"S": "a"}}}})  # not a leaf (R3.3)


def test_exists_false_matches_a_missing_field() -> None:
    pattern = {"dynamodb": {"NewImage": {"deleted_at": {"S": [{"exists": False}]}}}}
    assert matches(pattern, image(kind={"S": "EVENT"}))
    assert not matches(pattern, image(deleted_at={"S": "2026"}))


def test_exists_looks_at_leaves_only() -> None:
    # deleted_at holds an object (DynamoDB JSON), so no leaf is named deleted_at (R3.3).
    assert matches({"dynamodb": {"NewImage": {"deleted_at": [{"exists": False}]}}}, image(deleted_at={"S": "2026"}))


def test_numeric_range_on_a_json_number() -> None:
    pattern = '{"dynamodb": {"SizeBytes": [{"numeric": [">", 0, "<=", 100]}]}}'
    assert matches(pattern, {"dynamodb": {"SizeBytes": 100}})
    assert not matches(pattern, {"dynamodb": {"SizeBytes": 101}})
    assert not matches(pattern, {"dynamodb": {"SizeBytes": 0}})


def test_numeric_equals_compares_values() -> None:
    pattern = '{"n": [{"numeric": ["=", 300]}]}'
    assert matches(pattern, {"n": 300.0})
    assert not matches(pattern, {"n": 301})


def test_numeric_rule_never_matches_a_dynamodb_n_string() -> None:
    pattern = '{"dynamodb": {"NewImage": {"seq": {"N": [{"numeric": [">", 0]}]}}}}'
    assert not matches(pattern, image(seq={"N": "5"}))


def test_or_across_fields() -> None:
    pattern = {"$or": [{"eventName": ["INSERT"]}, {"dynamodb": {"NewImage": {"kind": {"S": ["EVENT"]}}}}]}
    assert matches(pattern, {"eventName": "INSERT"})
    assert matches(pattern, {"eventName": "MODIFY", **image(kind={"S": "EVENT"})})
    assert not matches(pattern, {"eventName": "MODIFY", **image(kind={"S": "HEAD"})})


def test_nested_fields_must_all_match() -> None:
    pattern = {"dynamodb": {"NewImage": {"kind": {"S": ["EVENT"]}, "tenant": {"S": ["acme"]}}}}
    assert matches(pattern, image(kind={"S": "EVENT"}, tenant={"S": "acme"}))
    assert not matches(pattern, image(kind={"S": "EVENT"}, tenant={"S": "globex"}))
    assert not matches(pattern, image(kind={"S": "EVENT"}))  # every named field must be present


def test_an_array_in_the_event_matches_if_any_element_does() -> None:
    pattern = {"dynamodb": {"NewImage": {"tags": {"SS": ["urgent"]}}}}
    assert matches(pattern, image(tags={"SS": ["low", "urgent"]}))
    assert not matches(pattern, image(tags={"SS": ["low"]}))


def test_an_event_passes_if_any_filter_matches() -> None:
    matcher = compile_filter_criteria([json.dumps({"a": ["1"]}), json.dumps({"b": ["2"]})])
    assert matcher.matches({"b": "2"})
    assert not matcher.matches({"a": "2", "b": "1"})


def test_no_filter_lets_everything_through() -> None:
    assert compile_filter_criteria([]).matches({"anything": 1})


def test_the_relay_filter_keeps_event_row_inserts_only() -> None:
    relay = json.dumps(FILTER_PATTERN)
    assert matches(relay, {"eventName": "INSERT", **image(kind={"S": "EVENT"})})
    assert not matches(relay, {"eventName": "INSERT", **image(kind={"S": "HEAD"})})
    # A MODIFY on a stream of new and old images always carries the old image: that is what the filter reads.
    rewrite = {
        "eventName": "MODIFY",
        "dynamodb": {"NewImage": {"kind": {"S": "EVENT"}}, "OldImage": {"kind": {"S": "EVENT"}}},
    }
    assert not matches(relay, rewrite)


# -- refused at compile time (R3.2) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "operator"),
    [
        ({"sk": [{"wildcard": "TENANT#*"}]}, "wildcard"),
        ({"dynamodb": {"NewImage": {"sk": {"S": [{"anything-but": {"prefix": "x"}}]}}}}, "anything-but + prefix"),
        ({"sk": [{"anything-but": {"suffix": "x"}}]}, "anything-but + suffix"),
        ({"sk": [{"anything-but": {"equals-ignore-case": "x"}}]}, "anything-but + equals-ignore-case"),
        ({"sk": [{"anything-but": {"wildcard": "x*"}}]}, "anything-but + wildcard"),
        ({"sk": [{"regex": "^x"}]}, "regex"),
        ({"ip": [{"cidr": "10.0.0.0/24"}]}, "cidr"),
    ],
)
def test_operators_pipes_does_not_support_are_refused(pattern: dict[str, Any], operator: str) -> None:
    with pytest.raises(
        UnsupportedFilterError, match=rf"'{re.escape(operator)}'.*not supported by EventBridge Pipes.*R3\.2"
    ):
        compile_filter_criteria([json.dumps(pattern)])


def test_a_pattern_that_is_not_json_is_refused() -> None:
    with pytest.raises(UnsupportedFilterError, match=r"not JSON.*R3\.2"):
        compile_filter_criteria(["{eventName: INSERT}"])


def test_a_bare_value_instead_of_a_list_is_refused() -> None:
    with pytest.raises(UnsupportedFilterError, match="must be a list or an object"):
        compile_filter_criteria(['{"eventName": "INSERT"}'])


def test_more_than_five_filters_are_refused() -> None:
    with pytest.raises(UnsupportedFilterError, match="at most 5"):
        compile_filter_criteria(['{"a": ["1"]}'] * 6)
