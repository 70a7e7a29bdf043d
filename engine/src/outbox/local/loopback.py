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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server

__all__ = ["LoopbackOnly", "LoopbackServer"]

logger = logging.getLogger(__name__)

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class LoopbackOnly:
    """WSGI middleware: ``app`` for requests to the loopback names at ``port`` from no other origin, no CORS."""

    def __init__(self, app: WsgiApp, port: int) -> None:
        self.app = app
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

        def without_cors(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            kept = [(name, value) for name, value in headers if not name.lower().startswith("access-control-")]
            return start_response(status, kept, exc_info)

        return self.app(environ, without_cors)

    @staticmethod
    def _refuse(start_response: Callable[..., Any], message: str) -> Iterable[bytes]:
        logger.warning("%s", message)
        body = (message + "\n").encode()
        start_response(
            "403 Forbidden", [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
        )
        return [body]


class LoopbackServer:
    """moto's server application on ``127.0.0.1:port``, behind ``LoopbackOnly``, in a thread of this process
    (``port=0``: a free port, ``port`` says which once started)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        app = DomainDispatcherApplication(create_backend_app)
        server = make_server("127.0.0.1", self.port, app, threaded=True, request_handler=MotoRequestHandler)
        self.port = server.server_port
        server.app = LoopbackOnly(app, self.port)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name=f"local-endpoint-{self.port}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
