"""``local_client``: a boto3 client of a local endpoint that needs nothing from the environment."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from moto.moto_server.threaded_moto_server import ThreadedMotoServer

from outbox.local.clients import STANDARD_RETRIES, local_client

AWS_ENVIRONMENT = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_PROFILE",
    "AWS_ACCOUNT_ID_ENDPOINT_MODE",
    "AWS_ENDPOINT_URL",
)


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    try:
        yield url
    finally:
        urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST")).close()
        server.stop()


@pytest.fixture
def no_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No credentials, region, profile or endpoint mode from the environment or the AWS config files."""
    for name in AWS_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    nowhere = tmp_path_factory.mktemp("aws") / "absent"
    monkeypatch.setenv("AWS_CONFIG_FILE", str(nowhere))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(nowhere))


def test_a_local_client_reaches_its_endpoint_with_nothing_from_the_environment(
    endpoint: str, no_aws_environment: None
) -> None:
    # Given a client of a moto server, in an environment without any AWS settings
    sqs = local_client("sqs", endpoint)

    # When it is used, then it reaches the server, in us-east-1, with the account endpoints off
    url = sqs.create_queue(QueueName="work")["QueueUrl"]
    assert sqs.list_queues()["QueueUrls"] == [url]
    assert (sqs.meta.region_name, sqs.meta.endpoint_url) == ("us-east-1", endpoint)
    assert sqs.meta.config.account_id_endpoint_mode == "disabled"


def test_a_local_client_retries_as_asked_or_as_botocore_does(no_aws_environment: None) -> None:
    assert local_client("dynamodb", retries=STANDARD_RETRIES).meta.config.retries == {
        "mode": "standard",
        "total_max_attempts": 4,  # botocore counts the first attempt too
    }
    assert local_client("dynamodb", retries={"total_max_attempts": 1}).meta.config.retries == {
        "mode": "standard",
        "total_max_attempts": 1,
    }
    assert local_client("dynamodb").meta.config.retries == {"mode": "standard"}
