"""The price list the cost figures use: one file, each price dated and sourced."""

from __future__ import annotations

import pytest

from benchmarks.report import dollars_per_million, load_prices, unit_price
from benchmarks.results import PerEvent


def test_every_price_has_a_date_a_source_and_is_marked_as_not_fetched_live() -> None:
    prices = load_prices()
    assert prices["fetched_live"] is False
    for name, entry in prices["prices"].items():
        assert entry["source"].startswith("https://aws.amazon.com/"), name
        assert entry["date"], name
        assert entry["usd"] > 0, name
        assert entry["per"] >= 1, name


def test_dollars_per_million_events_multiply_units_by_unit_prices() -> None:
    # Given one of every billed unit per event
    per_event = PerEvent.model_validate({name: 1.0 for name in PerEvent.model_fields})
    prices = load_prices()
    # Then a million events cost each unit price a million times
    money = dollars_per_million(per_event, prices)
    assert money.dynamodb_writes == pytest.approx(0.625)
    assert money.dynamodb_streams == pytest.approx(0.20)
    assert money.sqs == pytest.approx(0.90)
    assert money.lambda_duration == pytest.approx(unit_price(prices, "lambda_gb_second_arm64") * 1e6)
    assert money.total == pytest.approx(0.625 + 0.125 + 0.20 + 0.40 + 0.90 + 0.20 + money.lambda_duration)
