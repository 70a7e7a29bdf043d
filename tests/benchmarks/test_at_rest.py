"""The idle stack's monthly bill is read off the template, and docs/operating.md quotes exactly that figure."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.at_rest import alarm_metrics, idle_receives_per_month, monthly_bill, per_stored_gb, resources, total
from benchmarks.report import load_prices
from stacks.app_factory import STACK_NAME
from tests.conftest import Synthesized

OPERATING = Path(__file__).resolve().parents[2] / "docs" / "operating.md"


def test_the_bill_counts_what_the_template_holds(synthesized: Synthesized) -> None:
    template = synthesized.template(STACK_NAME)
    lines = {line.item: line for line in monthly_bill(template, load_prices())}
    alarms = resources(template, "AWS::CloudWatch::Alarm")
    # Each alarm reads one metric, but the dead-letter queues' arrival alarms, two each (visible and in flight).
    arrivals = [alarm for alarm in alarms if "DIFF(" in json.dumps(alarm)]
    assert len(arrivals) == 9  # one per dead-letter queue, the control-plane watch's and the settle pass's included
    assert lines["CloudWatch alarm metrics"].count == alarm_metrics(template) == len(alarms) + len(arrivals)
    assert lines["CloudWatch dashboards"].count == 1
    # The anchoring pass's liveness metrics, published every hour, traffic or not: PipesNotRunning, AnchoringPasses,
    # and its completeness pass's MissingPairs
    assert lines["CloudWatch custom metrics, hourly"].count == 3
    # One FIFO mapping (the durable consumer) and two standard (the record-change consumer, the tamper recorder),
    # five pollers each
    assert lines["SQS idle polls, FIFO queues"].count == idle_receives_per_month() == 648_000
    assert lines["SQS idle polls, standard queues"].count == 2 * 648_000


def test_the_readme_quotes_the_bill_of_the_template(synthesized: Synthesized) -> None:
    template = synthesized.template(STACK_NAME)
    prices = load_prices()
    section = OPERATING.read_text().split("What it costs at rest", 1)[1].split("\n\n", 1)[0]
    quoted = re.findall(r"\$(\d+\.\d\d)", section)
    expected = [f"{total(monthly_bill(template, prices)):.2f}", f"{per_stored_gb(template, prices):.2f}"]
    assert quoted[:2] == expected, "docs/operating.md's at-rest figures are stale: run python -m benchmarks.at_rest"


def test_a_price_missing_from_the_list_is_an_error_not_zero(synthesized: Synthesized) -> None:
    prices = load_prices()
    del prices["prices"]["cloudwatch_alarm_month"]
    with pytest.raises(KeyError, match="cloudwatch_alarm_month"):
        monthly_bill(synthesized.template(STACK_NAME), prices)
