"""External services the example modules call (storefront, carrier, notifier), behind small adapters.

Every call carries the idempotency key ``<event_id>:<subscription>``, so a retried or taken-over handler
never creates a second shipment: the remote side deduplicates. ``FakeService`` is the local stand-in
(used by the demo, the tests and the simulator); ``HttpService`` talks to a real endpoint.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class ServiceUnavailableError(Exception):
    """A retryable failure of the remote side (a 5xx, a timeout)."""


class Service(Protocol):
    def call(self, operation: str, idempotency_key: str, body: Mapping[str, Any]) -> dict[str, Any]: ...


@dataclass
class FakeService:
    """An in-memory remote API with idempotency keys, as a payment or shipping API implements them:
    the first call with a key takes effect, a repeat returns the first result without a second effect."""

    name: str
    effects: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    fail_next: int = 0  # fault injection: that many calls raise ServiceUnavailableError first
    before_effect: Callable[[str], None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def call(self, operation: str, idempotency_key: str, body: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.calls[idempotency_key] += 1
            if self.fail_next > 0:
                self.fail_next -= 1
                raise ServiceUnavailableError(f"{self.name} answered 503")
            if idempotency_key not in self.effects:
                if self.before_effect is not None:
                    self.before_effect(idempotency_key)
                self.effects[idempotency_key] = {
                    "operation": operation,
                    "reference": f"{self.name}-{len(self.effects) + 1}",
                    **body,
                }
            return dict(self.effects[idempotency_key])


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
        return cls(FakeService("storefront"), FakeService("carrier"), FakeService("notifier"))

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Services:
        """``COMMERCE_SERVICES_URL`` points the adapters at a real API; unset, they use in-memory fakes."""
        base = environ.get("COMMERCE_SERVICES_URL")
        if not base:
            return cls.fakes()
        return cls(HttpService(f"{base}/storefront"), HttpService(f"{base}/carrier"), HttpService(f"{base}/notifier"))
