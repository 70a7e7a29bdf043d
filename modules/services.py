"""External services the example modules call (storefront, carrier, notifier), behind small adapters.

Every call carries the idempotency key ``<event_id>:<subscription>``, so a retried or taken-over handler
never creates a second shipment: the remote side deduplicates. Which ones run is always said explicitly
(``COMMERCE_SERVICES``: ``fake`` or a URL), never defaulted: in-process each is the engine's ``FakeService``,
and ``HttpService`` talks to a real endpoint (the demo's and the tests' ``FakeServiceServer`` on loopback).
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from outbox.testing.services import FakeService, FakeServiceServer, ServiceUnavailableError

__all__ = [
    "FAKE",
    "SERVICES_VARIABLE",
    "SERVICE_NAMES",
    "HttpService",
    "Service",
    "ServiceUnavailableError",
    "Services",
    "ServicesNotConfiguredError",
    "parse_services_choice",
]

# The remote APIs the commerce module calls; locally each is a FakeService (outbox.testing.services).
SERVICE_NAMES = ("storefront", "carrier", "notifier")


class Service(Protocol):
    def call(
        self,
        operation: str,
        idempotency_key: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class HttpService:
    """POST ``<base_url>/<operation>`` with an ``Idempotency-Key`` header (and the caller's trace headers, so the
    service's own trace joins the request's); 5xx and timeouts are retryable."""

    base_url: str
    timeout_seconds: float = 5.0

    def call(
        self,
        operation: str,
        idempotency_key: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.base_url.rstrip('/')}/{operation}",
            data=json.dumps(body).encode(),
            headers={**(headers or {}), "Content-Type": "application/json", "Idempotency-Key": idempotency_key},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
                result: dict[str, Any] = json.loads(response.read() or b"{}")
                return result
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                raise ServiceUnavailableError(f"{self.base_url} answered {exc.code}") from exc
            raise
        except (TimeoutError, urllib.error.URLError) as exc:
            raise ServiceUnavailableError(f"{self.base_url} unreachable: {exc}") from exc


# The variable every function that builds the commerce module reads: "fake" or the services' base URL.
SERVICES_VARIABLE = "COMMERCE_SERVICES"
FAKE = "fake"


class ServicesNotConfiguredError(ValueError):
    """The commerce module was started without an explicit choice of the services it calls."""


@dataclass
class Services:
    storefront: Service
    carrier: Service
    notifier: Service

    @classmethod
    def fakes(cls) -> Services:
        return cls(*(FakeService(name) for name in SERVICE_NAMES))

    @classmethod
    def served_by(cls, server: FakeServiceServer) -> Services:
        """The in-process fakes behind a ``FakeServiceServer(SERVICE_NAMES)``, for tests that inspect them."""
        return cls(*(server.services[name] for name in SERVICE_NAMES))

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Services:
        """What ``COMMERCE_SERVICES`` says, and nothing else: ``fake`` (in-memory fakes: nothing leaves the
        function) or the base URL of the storefront, carrier and notifier API. Unset or anything else is
        refused at start, so that no deployment books shipments into a dictionary without having said so."""
        choice = parse_services_choice(environ.get(SERVICES_VARIABLE))
        if choice == FAKE:
            return cls.fakes()
        return cls(*(HttpService(f"{choice}/{name}") for name in SERVICE_NAMES))


def parse_services_choice(value: object) -> str:
    """``fake`` or an http(s) base URL without a trailing slash; anything else says what to set."""
    if isinstance(value, str) and value.strip() == FAKE:
        return FAKE
    if isinstance(value, str):
        url = urllib.parse.urlsplit(value.strip())
        if url.username or url.password:
            # The choice is in every function's environment and in the stack's ApplicationEnvironment output.
            raise ServicesNotConfiguredError(
                f"{SERVICES_VARIABLE} must not carry credentials (it is shown in the stack's outputs and in outbox "
                "status): give the base URL alone and keep the credentials in Secrets Manager"
            )
        if url.scheme in ("http", "https") and url.hostname and not url.query and not url.fragment:
            return value.strip().rstrip("/")
    what = "is not set" if value is None else f"is {value!r}"
    raise ServicesNotConfiguredError(
        f"{SERVICES_VARIABLE} {what}: say which services the commerce module calls, '{FAKE}' (in-memory fakes, "
        "nothing leaves the function) or the https base URL of your storefront/carrier/notifier API; "
        "deploying the example: cdk deploy -c commerceServices=fake (or =https://...)"
    )
