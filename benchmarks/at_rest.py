"""What a deployed stack costs a month with no traffic at all, read off its synthesized template.

Idle, Lambda, Pipes, SNS and on-demand DynamoDB cost nothing; what is left is billed per resource per month
(alarms, per metric each reads, dashboards, customer managed keys, the custom metrics published even with no
traffic) and the SQS
requests of Lambda's idle pollers: an SQS event
source mapping with MaximumConcurrency set keeps five long-polling connections open (it scales down to
two only without it, https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html), each waiting
up to 20 s per ReceiveMessage. Storage is per GB and grows with the log, so it is priced per GB, not guessed.

``python -m benchmarks.at_rest [--assembly cdk.out]`` prints the bill; docs/operating.md quotes its total, and a
test recomputes it from the tests' template, so the figure cannot drift from the stack.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from benchmarks.report import load_prices, unit_price
from outbox.audit.auditor import PUBLISHED_EVERY_PASS

IDLE_POLLERS_PER_MAPPING: Final = 5
LONG_POLL_SECONDS: Final = 20
SECONDS_PER_MONTH: Final = 30 * 24 * 3600


@dataclass(frozen=True)
class Line:
    item: str
    count: float
    unit_usd: float

    @property
    def usd(self) -> float:
        return self.count * self.unit_usd


def resources(template: Mapping[str, Any], resource_type: str) -> list[dict[str, Any]]:
    return [resource for resource in template["Resources"].values() if resource["Type"] == resource_type]


def heartbeat_metrics(template: Mapping[str, Any]) -> set[tuple[str, str, str]]:
    """The custom metrics published with no traffic at all: those an alarm treats silence on as breaching
    (``outbox_cdk.liveness``: the anchoring pass publishes them every hour, or the alarm fires), and the other
    counts every anchoring pass publishes, 0 included (``outbox.audit.auditor.PUBLISHED_EVERY_PASS``: the completeness
    pass's ``MissingPairs``). Each is (namespace, name, dimensions); the engine's other metrics count traffic
    and are not published idle."""
    found = set()
    every_pass = {metric.value for metric in PUBLISHED_EVERY_PASS}
    for alarm in resources(template, "AWS::CloudWatch::Alarm"):
        properties = alarm["Properties"]
        if properties.get("TreatMissingData") != "breaching" and properties.get("MetricName") not in every_pass:
            continue
        queries = [query["MetricStat"]["Metric"] for query in properties.get("Metrics", []) if "MetricStat" in query]
        for metric in [properties] if "MetricName" in properties else queries:
            if not metric["Namespace"].startswith("AWS/"):
                dimensions = json.dumps(metric.get("Dimensions", []), sort_keys=True)
                found.add((metric["Namespace"], metric["MetricName"], dimensions))
    return found


def alarm_metrics(template: Mapping[str, Any]) -> int:
    """What CloudWatch bills alarms by: the metrics each reads, one for an alarm on a metric, each metric of a
    metric math alarm (its expressions are free)."""
    return sum(
        sum(1 for query in alarm["Properties"]["Metrics"] if "MetricStat" in query)
        if "Metrics" in alarm["Properties"]
        else 1
        for alarm in resources(template, "AWS::CloudWatch::Alarm")
    )


def idle_receives_per_month() -> float:
    return IDLE_POLLERS_PER_MAPPING * SECONDS_PER_MONTH / LONG_POLL_SECONDS


def monthly_bill(template: Mapping[str, Any], prices: Mapping[str, Any]) -> list[Line]:
    """Each line of the idle stack's monthly bill, in US dollars, at ``prices``."""
    fifo_queues = {
        logical_id
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::SQS::Queue" and resource["Properties"].get("FifoQueue")
    }
    mappings = resources(template, "AWS::Lambda::EventSourceMapping")
    on_fifo = sum(1 for mapping in mappings if _queue_of(mapping) in fifo_queues)
    return [
        Line("CloudWatch alarm metrics", alarm_metrics(template), _price(prices, "cloudwatch_alarm_month")),
        Line(
            "CloudWatch custom metrics, hourly",
            len(heartbeat_metrics(template)),
            _price(prices, "cloudwatch_custom_metric_month"),
        ),
        Line(
            "CloudWatch dashboards",
            len(resources(template, "AWS::CloudWatch::Dashboard")),
            _price(prices, "cloudwatch_dashboard_month"),
        ),
        Line("KMS customer managed keys", len(resources(template, "AWS::KMS::Key")), _price(prices, "kms_key_month")),
        Line("SQS idle polls, FIFO queues", on_fifo * idle_receives_per_month(), _price(prices, "sqs_fifo_request")),
        Line(
            "SQS idle polls, standard queues",
            (len(mappings) - on_fifo) * idle_receives_per_month(),
            _price(prices, "sqs_standard_request"),
        ),
    ]


def per_stored_gb(template: Mapping[str, Any], prices: Mapping[str, Any]) -> float:
    """What each GB kept in the stack's tables costs a month: storage, plus backups where PITR is on."""
    tables = resources(template, "AWS::DynamoDB::Table")
    with_pitr = [
        table
        for table in tables
        if table["Properties"].get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled")
    ]
    storage = _price(prices, "dynamodb_storage_gb_month")
    return storage + (_price(prices, "dynamodb_pitr_gb_month") if with_pitr else 0.0)


def total(lines: list[Line]) -> float:
    return sum(line.usd for line in lines)


def _price(prices: Mapping[str, Any], name: str) -> float:
    if name not in prices["prices"]:
        raise KeyError(f"benchmarks/prices.json has no price {name!r}")
    return unit_price(prices, name)


def _queue_of(mapping: Mapping[str, Any]) -> str | None:
    """The logical id of the queue an event source mapping reads (its EventSourceArn is a GetAtt)."""
    arn = mapping["Properties"]["EventSourceArn"]
    return arn["Fn::GetAtt"][0] if isinstance(arn, dict) and "Fn::GetAtt" in arn else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assembly", type=Path, help="a synthesized cdk.out (default: synthesize like make demo)")
    args = parser.parse_args(argv)
    if args.assembly is None:
        # Before jsii starts: its Node 20 end-of-life banner would be the first thing printed.
        os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
        from benchmarks.assembly import STACK_NAME, synthesize

        assembly, stack = synthesize(), STACK_NAME
    else:
        assembly, stack = args.assembly, "OutboxEngine"
    template_file = assembly / f"{stack}.template.json"
    if not template_file.is_file():
        parser.error(f"{template_file} does not exist: synthesize first (make synth CONTEXT=...), or omit --assembly")
    template = json.loads(template_file.read_text())
    prices = load_prices()
    lines = monthly_bill(template, prices)
    for line in lines:
        print(f"{line.item:34} {line.count:>12,.0f} x ${line.unit_usd:<10.8g} = ${line.usd:7.2f}")
    print(f"{'idle, per month':34} {'':>12} {'':13}  ${total(lines):7.2f}")
    print(f"{'plus, per GB stored a month':34} {'':>12} {'':13}  ${per_stored_gb(template, prices):7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
