"""The price list the cost figures use: one file, each price dated and sourced."""

from __future__ import annotations

import pytest

from benchmarks.report import dollars_per_million, load_prices, unit_price


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
    per_event = {
        "write_units": 1.0,
        "read_units": 1.0,
        "stream_read_units": 1.0,
        "pipe_requests": 1.0,
        "sqs_requests_fifo": 1.0,
        "sqs_requests_standard": 1.0,
        "lambda_invocations": 1.0,
        "gb_seconds": 1.0,
    }
    prices = load_prices()
    # Then a million events cost each unit price a million times
    money = dollars_per_million(per_event, prices)
    assert money["DynamoDB writes"] == pytest.approx(0.625)
    assert money["DynamoDB Streams"] == pytest.approx(0.20)
    assert money["SQS"] == pytest.approx(0.90)
    assert money["Lambda duration"] == pytest.approx(unit_price(prices, "lambda_gb_second_arm64") * 1e6)
