"""External services the example modules call (storefront, carrier, notifier), behind small adapters.

Every call carries the idempotency key ``<event_id>:<subscription>``, so a retried or taken-over handler
never creates a second shipment: the remote side deduplicates. Locally each is the engine's ``FakeService``
(the demo, the tests and the simulator); ``HttpService`` talks to a real endpoint.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from outbox.testing.services import FakeService, FakeServiceServer, ServiceUnavailableError

__all__ = ["SERVICE_NAMES", "HttpService", "Service", "ServiceUnavailableError", "Services"]

# The remote APIs the commerce module calls; locally each is a FakeService (outbox.testing.services).
SERVICE_NAMES = ("storefront", "carrier", "notifier")


class Service(Protocol):
    def call(self, operation: str, idempotency_key: str, body: Mapping[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class HttpService:
    """POST ``<base_url>/<operation>`` with an ``Idempotency-Key`` header; 5xx and timeouts are retryable."""

    base_url: str
    timeout_seconds: float = 5.0

    def call(self, operation: str, idempotency_key: str, body: Mapping[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.base_url.rstrip('/')}/{operation}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
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
        """``COMMERCE_SERVICES_URL`` points the adapters at a real API; unset, they use in-memory fakes."""
        base = environ.get("COMMERCE_SERVICES_URL")
        if not base:
            return cls.fakes()
        return cls(HttpService(f"{base}/storefront"), HttpService(f"{base}/carrier"), HttpService(f"{base}/notifier"))
