"""Stand-ins for the external services a subscription calls (a payment, shipping or mail API).

``FakeService`` is an in-memory remote API with idempotency keys, as real payment and shipping APIs
implement them; ``FakeServiceServer`` serves a few of them over HTTP on loopback, so handlers running in
the local runtime call them exactly as they would call the real API. Both are test tools: they count
calls per idempotency key, fail on request (``fail_next``) and run hooks before the effect and after the
answer, where a crash is injected (``outbox.local.faults``).
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

try:  # the local runtime's Lambda deadline. The Lambda layer carries this module but no local runtime: nothing to
    # enforce there, where Lambda itself stops the invocation.
    from outbox.local.deadline import enforce as enforce_deadline
except ImportError:  # pragma: no cover - exercised by a test that hides outbox.local

    def enforce_deadline() -> None:
        return None


class ServiceUnavailableError(Exception):
    """A retryable failure of the remote side (a 5xx, a timeout)."""


@dataclass
class FakeService:
    """The first call with an idempotency key takes effect; a repeat returns the first result, no second effect."""

    name: str
    effects: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    fail_next: int = 0  # fault injection: that many calls raise ServiceUnavailableError first
    before_effect: Callable[[str], None] | None = None
    # Run once a call is answered (its effect applied, or the first call's result found), before the answer leaves:
    # raising there loses the answer, as a worker that dies or a connection that drops would.
    after_call: Callable[[str], None] | None = None
    # The trace headers (traceparent, tracestate) of each call, by idempotency key, in the order received.
    trace_headers: dict[str, list[dict[str, str]]] = field(default_factory=lambda: defaultdict(list))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def call(
        self,
        operation: str,
        idempotency_key: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        enforce_deadline()  # a call made in process after the caller's Lambda deadline never leaves it
        with self._lock:
            self.calls[idempotency_key] += 1
            traced = {name: value for name, value in (headers or {}).items() if name in ("traceparent", "tracestate")}
            self.trace_headers[idempotency_key].append(traced)
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
            answer = dict(self.effects[idempotency_key])
        if self.after_call is not None:
            self.after_call(idempotency_key)
        return answer


class FakeServiceServer:
    """``POST /<service>/<operation>`` with an ``Idempotency-Key`` header -> that FakeService's answer
    (503 while it is failing, 400 for an unknown service or a missing key)."""

    def __init__(self, names: Iterable[str], port: int = 0) -> None:
        self.services = {name: FakeService(name) for name in names}
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-services", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeServiceServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        services = self.services

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                _, service, operation = [*self.path.split("/"), "", ""][:3]
                length = int(self.headers.get("Content-Length") or 0)
                body: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
                key = self.headers.get("Idempotency-Key")
                if service not in services or not key:
                    self._answer(400, {"error": "unknown service or missing Idempotency-Key"})
                    return
                headers = {name.lower(): value for name, value in self.headers.items()}
                try:
                    self._answer(200, services[service].call(operation, key, body, headers))
                except ServiceUnavailableError as exc:
                    self._answer(503, {"error": str(exc)})

            def _answer(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler
