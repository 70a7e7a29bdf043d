"""What stops silently, on the local runtime: a pipe stopped with StopPipe delivers nothing (its events stay in
the log), and the hourly anchoring pass reports it. Each pass publishes, as its function's EMF lines, the
number of the stack's pipes not RUNNING and that it ran, under the anchoring's service: the metrics
``PipesNotRunningAlarm`` and ``AnchoringStoppedAlarm`` read (tests/infrastructure/test_liveness.py)."""

from __future__ import annotations

import json
from typing import Any

from outbox.audit.auditor import Metric
from outbox_cdk import audit
from outbox_cdk.lambda_defaults import METRICS_NAMESPACE
from tests.e2e.backends import LocalBackend, claim_statuses
from tests.e2e.test_pipeline import order_and_pay, unique
from tests.e2e.test_tamper_evidence import run_anchoring

ANCHORING = "AnchoringFunctionName"
PIPES = ("RelayPipeName", "TamperPipeName", "RecordChangePipeName")


def published(local: LocalBackend, output_name: str = ANCHORING) -> list[dict[str, Any]]:
    """The EMF documents (Powertools metrics) the function printed, oldest first."""
    documents = []
    for line in local.runtime.function(output_name).log.lines:
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if isinstance(document, dict) and "_aws" in document:
            documents.append(document)
    return documents


def last_pass_metrics(local: LocalBackend) -> dict[str, Any]:
    """The metrics of the last anchoring pass, as CloudWatch would read them: name -> the values published (one
    each), checked to be in the engine's namespace with the anchoring's service as their one dimension."""
    document = published(local)[-1]
    [directive] = document["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == METRICS_NAMESPACE
    assert directive["Dimensions"] == [["service"]]
    assert document["service"] == audit.ANCHOR_SERVICE
    return {metric["Name"]: document[metric["Name"]] for metric in directive["Metrics"]}


def pipes(local: LocalBackend) -> Any:
    return local.client("pipes")


def test_each_pass_publishes_how_many_pipes_are_not_running_and_that_it_ran(local: LocalBackend) -> None:
    # Every pipe running: 0 is published, not nothing (the alarm treats a missing datapoint as breaching)
    assert set(run_anchoring(local)["pipes"].values()) == {"RUNNING"}
    assert last_pass_metrics(local) == {
        Metric.PIPES_NOT_RUNNING.value: [0],
        Metric.ANCHORING_PASSES.value: [1],
        Metric.MISSING_PAIRS.value: [0],
    }

    for stopped, output in enumerate(PIPES, start=1):
        pipes(local).stop_pipe(Name=local.output(output))

        states = run_anchoring(local)["pipes"]

        assert sorted(states.values()).count("STOPPED") == stopped
        assert last_pass_metrics(local) == {
            Metric.PIPES_NOT_RUNNING.value: [stopped],
            Metric.ANCHORING_PASSES.value: [1],
            Metric.MISSING_PAIRS.value: [0],
        }

    for output in PIPES:
        pipes(local).start_pipe(Name=local.output(output))
    run_anchoring(local)
    assert last_pass_metrics(local)[Metric.PIPES_NOT_RUNNING.value] == [0]


def test_a_stopped_relay_pipe_delivers_nothing_until_it_is_started_again(local: LocalBackend) -> None:
    # Given the relay pipe stopped
    relay = local.output("RelayPipeName")
    pipes(local).stop_pipe(Name=relay)

    # When an event is emitted: it is in the log, and nothing delivers it
    event_id = order_and_pay(local, unique("tenant"))
    local.settle()
    assert claim_statuses(local, event_id) == {}
    run_anchoring(local)
    assert last_pass_metrics(local)[Metric.PIPES_NOT_RUNNING.value] == [1]

    # Then, started again, the pipe goes on from where it stopped (within the stream's 24 hours)
    pipes(local).start_pipe(Name=relay)
    local.settle()
    assert claim_statuses(local, event_id)
    assert set(claim_statuses(local, event_id).values()) == {"COMPLETED"}
    run_anchoring(local)
    assert last_pass_metrics(local)[Metric.PIPES_NOT_RUNNING.value] == [0]
