"""The local runtime's moto server, for the SDK clients of this machine only.

moto's own server answers any web page: its Flask app reflects every ``Origin`` (CORS), so a page the
developer has open could read the tables and send to the queues. This one serves the same application behind
a guard that refuses, with HTTP 403 and a message that says why:

- a request whose ``Host`` is not the loopback address and port it listens on (``127.0.0.1:PORT``,
  ``localhost:PORT``, ``[::1]:PORT``): a page whose name was rebound to 127.0.0.1 (DNS rebinding) sends its own
  name there;
- a request that carries an ``Origin`` other than the endpoint's own: a browser's, from another page (a form's
  POST needs no preflight, so turning CORS off alone would not stop it);

and takes every ``Access-Control-*`` header out of what it answers: no CORS at all. The SDKs send neither an
``Origin`` nor another ``Host`` (boto3 and the AWS CLI with ``--endpoint-url http://127.0.0.1:PORT`` or
``http://localhost:PORT``), so they are served as before.

It also refuses a request signed for another region than the runtime's (``us-east-1``): moto would answer it
from an empty region, an empty list where the user expects their tables. And it answers ``GET /_outbox`` itself
(``about``: the runtime's virtual clock, the folder it serves), for ``outbox --local`` and for a second
``outbox local serve`` that finds the port taken. Requests run side by side through a ``RequestGate``, which a
snapshot of the state closes: none is under way while the state is written.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from moto.moto_api._internal.models import moto_api_backend
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server

from outbox.local.clients import REGION, RUNTIME_AGENT
from outbox.local.served import ABOUT_PATH

__all__ = ["ABOUT_PATH", "LoopbackOnly", "LoopbackServer", "PortInUseError", "RequestGate"]

logger = logging.getLogger(__name__)

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_SIGNED_REGION = re.compile(r"Credential=[^/,]*/\d{8}/(?P<region>[^/,]+)/")


class RequestGate:
    """Requests run side by side; ``closed()`` waits for those under way and holds new ones back until it ends
    (while the served state is written to disk, say). ``changes`` counts the requests from outside the
    runtime (not its own clients), so that a state nobody changed is not written again."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._running = 0
        self._closed = False
        self.changes = 0

    @contextmanager
    def request(self, *, outside: bool) -> Iterator[None]:
        with self._condition:
            while self._closed:
                self._condition.wait()
            self._running += 1
            self.changes += outside
        try:
            yield
        finally:
            with self._condition:
                self._running -= 1
                self._condition.notify_all()

    @contextmanager
    def closed(self) -> Iterator[None]:
        with self._condition:
            while self._closed:
                self._condition.wait()
            self._closed = True
            while self._running:
                self._condition.wait()
        try:
            yield
        finally:
            with self._condition:
                self._closed = False
                self._condition.notify_all()


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class LoopbackOnly:
    """WSGI middleware: ``app`` for requests to the loopback names at ``port`` from no other origin, no CORS."""

    def __init__(
        self,
        app: WsgiApp,
        port: int,
        *,
        region: str = REGION,
        gate: RequestGate | None = None,
        about: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self.app = app
        self.region = region
        self.gate = gate or RequestGate()
        self.about = about
        self.hosts = {f"{name}:{port}" for name in LOOPBACK_NAMES}
        if port == 80:  # a client leaves the default port out of Host
            self.hosts.update(LOOPBACK_NAMES)
        self.origins = {f"http://{host}" for host in self.hosts}
        self.endpoint = f"http://127.0.0.1:{port}"

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        host = str(environ.get("HTTP_HOST", ""))
        if host.lower() not in self.hosts:
            return self._refuse(
                start_response,
                f"refused: the request's Host header is {host!r}; this local endpoint serves {self.endpoint} "
                f"(or localhost or [::1] at the same port) only, for the SDK clients of this machine: point the "
                f"client's endpoint URL there",
            )
        origin = environ.get("HTTP_ORIGIN")
        if origin is not None and str(origin).lower() not in self.origins:
            return self._refuse(
                start_response,
                f"refused: a request from the web page at {origin!r}; this local endpoint serves the SDK clients "
                f"of this machine (boto3, the AWS CLI, outbox --local at {self.endpoint}), never a browser's "
                f"page, and answers no CORS",
            )

        if environ.get("PATH_INFO") == ABOUT_PATH and environ.get("REQUEST_METHOD") == "GET":
            return self._about(start_response)
        signed = _SIGNED_REGION.search(str(environ.get("HTTP_AUTHORIZATION", "")))
        if signed is not None and signed["region"] != self.region:
            return self._wrong_region(start_response, signed["region"])

        def without_cors(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            kept = [(name, value) for name, value in headers if not name.lower().startswith("access-control-")]
            return start_response(status, kept, exc_info)

        with self.gate.request(outside=RUNTIME_AGENT not in str(environ.get("HTTP_USER_AGENT", ""))):
            return list(self.app(environ, without_cors))  # answered in full before the gate may close

    def _about(self, start_response: Callable[..., Any]) -> Iterable[bytes]:
        body = json.dumps(dict(self.about()) if self.about else {}).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    def _wrong_region(self, start_response: Callable[..., Any], region: str) -> Iterable[bytes]:
        message = (
            f"refused: this request is for region {region}; the local runtime serves region {self.region} only "
            f"(there, {region} would answer as empty): use --region {self.region}, or AWS_DEFAULT_REGION="
            f"{self.region}"
        )
        logger.warning("%s", message)
        # The error as the JSON protocols of DynamoDB, SQS and Pipes put it, so the SDK shows its message.
        body = json.dumps({"__type": "InvalidRegion", "message": message, "Message": message}).encode()
        start_response(
            "400 Bad Request",
            [
                ("Content-Type", "application/x-amz-json-1.0"),
                ("x-amzn-ErrorType", "InvalidRegion"),
                ("Content-Length", str(len(body))),
            ],
        )
        return [body]

    @staticmethod
    def _refuse(start_response: Callable[..., Any], message: str) -> Iterable[bytes]:
        logger.warning("%s", message)
        body = (message + "\n").encode()
        start_response(
            "403 Forbidden", [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
        )
        return [body]


class PortInUseError(OSError):
    """The port is taken (by another program, or another served runtime)."""

    def __init__(self, port: int) -> None:
        super().__init__(f"127.0.0.1:{port} is in use")
        self.port = port


class LoopbackServer:
    """moto's server application on ``127.0.0.1:port``, behind ``LoopbackOnly``, in a thread of this process
    (``port=0``: a free port, ``port`` says which once started)."""

    def __init__(self, port: int, *, about: Callable[[], Mapping[str, Any]] | None = None) -> None:
        self.port = port
        self.about = about
        self.gate = RequestGate()
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        # moto's backends are the process's: an endpoint starts from none of what an earlier one of the process left
        # (its runtime then creates its tables, or puts its saved state back).
        moto_api_backend.reset()
        app = DomainDispatcherApplication(create_backend_app)
        try:
            server = make_server("127.0.0.1", self.port, app, threaded=True, request_handler=MotoRequestHandler)
        except SystemExit as exc:  # werkzeug prints "Address already in use" and exits: say it as an error
            raise PortInUseError(self.port) from exc
        self.port = server.server_port
        server.app = LoopbackOnly(app, self.port, gate=self.gate, about=self.about)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name=f"local-endpoint-{self.port}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
