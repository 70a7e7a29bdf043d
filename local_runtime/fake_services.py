"""The example modules' external services (storefront, carrier, notifier) as a real HTTP server on
loopback, so handlers call them exactly as in AWS (``COMMERCE_SERVICES_URL``), idempotency keys included."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from modules.services import FakeService, Services, ServiceUnavailableError


class FakeServiceServer:
    """``POST /<service>/<operation>`` with an ``Idempotency-Key`` header -> the FakeService's answer."""

    def __init__(self, port: int = 0) -> None:
        self.services = {name: FakeService(name) for name in ("storefront", "carrier", "notifier")}
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-services", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def as_services(self) -> Services:
        return Services(self.services["storefront"], self.services["carrier"], self.services["notifier"])

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
                try:
                    self._answer(200, services[service].call(operation, key, body))
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
