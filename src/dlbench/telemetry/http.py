"""The exporter's HTTP server: ``/metrics`` for Prometheus, steady under load and idle-connection floods.

prometheus_client's ``start_http_server`` is a wsgiref server with a thread per connection, a listen
backlog of 5 and no timeout: 200 concurrent scrapers saw a p99 of 28 s and 14-17 % timeouts, and
500 idle connections held 500 threads for as long as their clients liked. This server instead runs
one asyncio event loop on a daemon thread:

* an open connection costs a file descriptor, not a thread; the listen backlog is 1024;
* a connection must deliver each request (line and headers, at most 16 KiB) within
  ``idle_timeout_s`` of the previous response or of connecting, and must read each response within
  the same time, else it is closed: idle, half-open and trickling (slowloris) clients go away;
* above ``max_connections`` the connection idle the longest is closed to make room, so a flood of
  idle sockets cannot lock scrapers out;
* rendering the registry (CPU work) runs on a worker thread, and scrapes arriving while a
  rendering is under way share it (one rendering at a time per format): they would get the same
  readings anyway, since the collector refreshes them on its own clock.

HTTP/1.1 with keep-alive (Prometheus reuses its connection), ``GET``/``HEAD`` of ``/metrics`` with
the text or OpenMetrics format negotiated from ``Accept`` and gzip from ``Accept-Encoding``, as
prometheus_client does.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

MAX_REQUEST_BYTES = 16 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            500: "Internal Server Error"}


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address (127.0.0.0/8, ::1)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def exposure_warning(host: str, port: int) -> str | None:
    """The warning to print when ``host`` is reachable from other machines; None on loopback."""
    if is_loopback(host):
        return None
    return (f"warning: {host}:{port} is reachable from other hosts and serves without authentication "
            "(hostnames, GPU UUIDs, run ids); bind 127.0.0.1 unless Prometheus scrapes from elsewhere, "
            "and firewall the port.")


class MetricsServer:
    """Serves ``registry`` on ``http://host:port/metrics`` from a daemon thread; see the module docstring.

    The port is bound in the constructor (``OSError`` when taken; port 0 takes a free one, see
    :attr:`server_address`). :meth:`shutdown` stops serving and closes every connection.
    """

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0,
                 idle_timeout_s: float = 10.0, max_connections: int = 1000, backlog: int = 1024):
        self.registry = registry
        self.idle_timeout_s = idle_timeout_s
        self.max_connections = max_connections
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        self._socket = socket.create_server((host, port), family=family, backlog=backlog)
        self._backlog = backlog
        self.server_address = self._socket.getsockname()
        self._render_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="dlbench-exporter-render")
        self._renderings: dict[tuple[str, bool], asyncio.Future] = {}
        self._connections: dict[asyncio.StreamWriter, float | None] = {}  # writer -> idle since (None: busy)
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="dlbench-exporter-http", daemon=True)
        self._start_error: BaseException | None = None
        self._thread.start()
        started.wait()
        if self._start_error is not None:  # the loop could not serve: report it here, like a bind error
            self._socket.close()
            raise OSError(f"the metrics server did not start: {self._start_error}") from self._start_error

    # -- lifecycle ----------------------------------------------------------------------------

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve(started))
        except BaseException as exc:  # noqa: BLE001 - handed to the constructor, which raises it
            self._start_error = exc
            started.set()
        pending = asyncio.all_tasks(self._loop)  # handlers of connections closed at shutdown
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _serve(self, started: threading.Event) -> None:
        self._stopping = asyncio.Event()
        # asyncio listens again with its own backlog (default 100): pass ours, or bursts overflow it
        server = await asyncio.start_server(self._connection, sock=self._socket, limit=MAX_REQUEST_BYTES,
                                            backlog=self._backlog)
        started.set()
        async with server:
            await self._stopping.wait()
            server.close()
            for writer in list(self._connections):
                writer.close()

    def shutdown(self) -> None:
        """Stop serving, close every connection and wait for the server thread."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(timeout=10)
        self._render_pool.shutdown(wait=False)

    def server_close(self) -> None:
        """Release the port (after :meth:`shutdown`)."""
        self._socket.close()

    # -- connections --------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._make_room()
        self._connections[writer] = time.monotonic()
        try:
            while await self._one_request(reader, writer):
                self._connections[writer] = time.monotonic()
        except (ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # idle too long, reset, closed mid-request or an oversized request: drop the connection
        finally:
            self._connections.pop(writer, None)
            writer.close()

    def _make_room(self) -> None:
        """Close the connection idle the longest when at ``max_connections``."""
        if len(self._connections) < self.max_connections:
            return
        idle = [(since, w) for w, since in self._connections.items() if since is not None]
        if idle:
            oldest = min(idle, key=lambda pair: pair[0])[1]
            self._connections.pop(oldest, None)
            oldest.close()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection should close."""
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_timeout_s)
        self._connections[writer] = None  # busy: never evicted while answering
        request = _parse_head(head)
        if request is None:
            await self._send(writer, 400, b"bad request\n", "text/plain; charset=utf-8", close=True)
            return False
        method, path, version, headers = request
        close = headers.get("connection", "").lower() == "close" or version == "HTTP/1.0"
        if method not in ("GET", "HEAD"):
            status, body, content_type, encoding = 405, b"only GET and HEAD\n", "text/plain; charset=utf-8", None
        elif path.split("?", 1)[0] not in ("/metrics", "/"):
            status, body, content_type, encoding = 404, b"not found: metrics are at /metrics\n", "text/plain; charset=utf-8", None
        else:
            status, body, content_type, encoding = await self._metrics(headers)
        await self._send(writer, status, b"" if method == "HEAD" else body, content_type, close, encoding, len(body))
        return not close

    async def _send(self, writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str,
                    close: bool, encoding: str | None = None, length: int | None = None) -> None:
        lines = [f"HTTP/1.1 {status} {_REASONS[status]}", f"Content-Type: {content_type}",
                 f"Content-Length: {len(body) if length is None else length}",
                 f"Connection: {'close' if close else 'keep-alive'}"]
        if encoding:
            lines.append(f"Content-Encoding: {encoding}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await asyncio.wait_for(writer.drain(), self.idle_timeout_s)  # a client that never reads is dropped

    # -- rendering ----------------------------------------------------------------------------

    async def _metrics(self, headers: dict[str, str]) -> tuple[int, bytes, str, str | None]:
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        zipped = "gzip" in headers.get("accept-encoding", "").lower()
        key = (content_type, zipped)
        rendering = self._renderings.get(key)
        if rendering is None:  # first scrape of a burst: render; the others wait for this one
            rendering = self._loop.run_in_executor(self._render_pool, _render, encoder, self.registry, zipped)
            self._renderings[key] = rendering
            rendering.add_done_callback(lambda _: self._renderings.pop(key, None))
        try:
            body = await asyncio.shield(rendering)
        except Exception as exc:  # noqa: BLE001 - a broken collector answers 500, the server lives on
            return 500, f"error while collecting metrics: {type(exc).__name__}: {exc}\n".encode(), "text/plain", None
        return 200, body, content_type, "gzip" if zipped else None


def _render(encoder, registry: CollectorRegistry, zipped: bool) -> bytes:
    body = encoder(registry)
    return gzip.compress(body, compresslevel=5) if zipped else body


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]] | None:
    """(method, path, version, lower-cased headers) of a request head, or None when malformed."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, path, version = lines[0].split(" ")
    except ValueError:
        return None
    if not version.startswith("HTTP/1.") or not path.startswith("/"):
        return None
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return method, path, version, headers


__all__ = ["MetricsServer", "is_loopback", "exposure_warning"]
