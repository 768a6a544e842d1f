"""The HTTP edge of the schema registry REST API: `http.server`'s ThreadingHTTPServer around `rest.handle`.

    server = RegistryServer(registry, "127.0.0.1", 8081)
    server.start()          # serves on a thread it owns; server.url -> "http://127.0.0.1:8081"
    ...
    server.stop()           # stops accepting, joins the thread; the registry stays the caller's

Rule 1: a request body is read only after its Content-Length is checked against `MAX_BODY_BYTES`: a larger
(or missing, or chunked) body is refused with Confluent's error body (413 / 411) before any of it is buffered,
so memory per request is bounded.
Rule 2: every response is JSON with `rest.CONTENT_TYPE`; an unexpected exception in a handler answers 500
with error_code 50001 naming it, and the server goes on serving.
Resource handling: one thread (`serve_forever`) owned by the server object, plus one daemon thread per
connection (ThreadingHTTPServer); `stop()` shuts the loop down, closes the listening socket and joins the
owner thread. A kept-alive connection idle for `IDLE_TIMEOUT_S` is closed, so its thread ends by itself.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from sparklog.schemas import rest
from sparklog.schemas.registry import SchemaRegistry

MAX_BODY_BYTES = 1 << 20  # Avro schemas are small; Confluent's own default request limit is of this order
IDLE_TIMEOUT_S = 60.0  # a kept-alive connection with no request for this long is closed
log = logging.getLogger(__name__)


class ListenerError(ValueError):
    """A `listeners` value that is not `http://HOST:PORT`."""


def parse_listener(text: str) -> tuple[str, int]:
    """Confluent's `listeners=http://HOST:PORT` (one listener; PORT 0 picks a free one) -> (host, port)."""
    parts = urlsplit(text.strip())
    if parts.scheme != "http" or not parts.hostname or parts.port is None or parts.path not in ("", "/"):
        raise ListenerError(f"listeners must be http://HOST:PORT, not {text!r}")
    return parts.hostname, parts.port


class RegistryServer:
    def __init__(self, registry: SchemaRegistry, host: str = "127.0.0.1", port: int = 8081) -> None:
        self.registry = registry
        self._httpd = ThreadingHTTPServer((host, port), _handler_class(registry))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "RegistryServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="schema-registry-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> "RegistryServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _handler_class(registry: SchemaRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(_RegistryHandler):
        pass

    Handler.registry = registry
    return Handler


class _RegistryHandler(BaseHTTPRequestHandler):
    registry: SchemaRegistry
    protocol_version = "HTTP/1.1"  # keep-alive: the clients reuse their connections
    server_version = "sparklog-schema-registry"
    timeout = IDLE_TIMEOUT_S  # StreamRequestHandler sets it on the connection's socket

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_DELETE = do_GET

    def _serve(self) -> None:
        body = self._body()
        if body is None:
            return
        try:
            response = rest.handle(self.registry, self.command, self.path, body)
        except Exception as exc:  # Rule 2: a handler's bug answers 500 and the server goes on
            log.exception("schema registry: %s %s failed", self.command, self.path)
            response = rest.RestError(50001, f"internal error: {exc!r}").response()
        self._send(response)

    def _body(self) -> bytes | None:
        """Rule 1: the body, read only once its declared length is within the limit; None once refused."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._refuse(411, "chunked request bodies are not accepted: send a Content-Length")
        length = self.headers.get("Content-Length")
        if length is None:
            return b"" if self.command in ("GET", "DELETE") else self._refuse(411, "a Content-Length is required")
        if not length.isdigit():
            return self._refuse(400, f"malformed Content-Length {length!r}")
        if int(length) > MAX_BODY_BYTES:
            return self._refuse(413, f"request body of {length} bytes exceeds the limit of {MAX_BODY_BYTES} bytes")
        return self.rfile.read(int(length))

    def _refuse(self, code: int, message: str) -> None:
        self.close_connection = True  # the unread body must not be taken for the next request
        self._send(rest.RestError(code, message).response())
        return None

    def _send(self, response: rest.Response) -> None:
        payload = json.dumps(response.body).encode("utf-8")
        self.send_response(response.status)
        self.send_header("Content-Type", rest.CONTENT_TYPE)
        self.send_header("Content-Length", str(len(payload)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args) -> None:
        log.debug("schema registry: " + format, *args)
