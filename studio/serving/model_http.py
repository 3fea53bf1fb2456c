"""The web process's HTTP/1.1 client for world-model servers: kept-alive connections per
origin on the event loop, the response parsed by httptools (uvicorn's C parser).

Why not httpx.AsyncClient: its connection pool (httpcore) walks every connection for every
request it assigns, asking each whether it expired; with 32 steps in flight that cost 5-20 ms
of CPU per request and put 200-500 ms on the p50 of 32 agents in lock-step
(scripts/bench_episodes.py), where this client spends about 0.1 ms. A request is one JSON POST
(or GET) answered with a length or chunks: that is all an OpenAI-compatible
/chat/completions call needs. Behind an HTTP proxy (HTTP_PROXY, HTTPS_PROXY or ALL_PROXY
set), requests go through httpx, which honours the proxy settings."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import urllib.request
import weakref
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

USER_AGENT = "agentworld-studio"
IDLE_PER_ORIGIN = 512  # kept-alive connections a loop keeps to one server
READ_CHUNK = 256 * 1024


class ModelHTTPError(Exception):
    """The request got no answer: the server cannot be reached, or it dropped the
    connection before answering (`timed_out`: the time ran out)."""

    def __init__(self, message: str, *, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


@dataclass
class Response:
    status: int
    headers: dict[str, str]  # names lower-case
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


@dataclass
class _Parsed:
    headers: dict[str, str] = field(default_factory=dict)
    body: list[bytes] = field(default_factory=list)
    complete: bool = False
    started: bool = False
    keep_alive: bool = False
    parser: Any = None

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.started = True

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        # llhttp answers this only while the message is parsed, not once it is complete
        self.keep_alive = bool(self.parser.should_keep_alive())

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


_TLS: ssl.SSLContext | None = None


def _tls() -> ssl.SSLContext:
    global _TLS
    if _TLS is None:
        try:
            import certifi  # what httpx and the OpenAI SDK verify against

            _TLS = ssl.create_default_context(cafile=certifi.where())
        except ImportError:  # pragma: no cover - certifi comes with httpx
            _TLS = ssl.create_default_context()
    return _TLS


def proxied() -> bool:
    """Whether this process is told to reach servers through a proxy."""
    return any(urllib.request.getproxies().get(k) for k in ("http", "https", "all"))


class Client:
    """One event loop's connections (a loop's streams cannot serve another loop)."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float,
    ) -> Response:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ModelHTTPError(f"{url} is not an http(s) URL")
        port = parts.port or (443 if scheme == "https" else 80)
        origin = (scheme, parts.hostname, port)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", f"User-Agent: {USER_AGENT}",
                 "Accept: application/json"]  # fmt: skip
        for name, value in (headers or {}).items():
            lines.append(f"{name}: {value}")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        payload = head + body if body is not None else head
        try:
            async with asyncio.timeout(timeout):
                while True:
                    conn, reused = await self._connection(origin)
                    try:
                        response, keep = await self._exchange(conn, payload)
                    except _Stale:
                        conn.close()
                        if reused:
                            continue  # a kept-alive connection the server had closed
                        raise ModelHTTPError(
                            "the server closed the connection without answering"
                        ) from None
                    except BaseException:
                        conn.close()
                        raise
                    if keep and conn.usable():
                        idle = self._idle.setdefault(origin, [])
                        if len(idle) < IDLE_PER_ORIGIN:
                            idle.append(conn)
                        else:
                            conn.close()
                    else:
                        conn.close()
                    return response
        except TimeoutError:
            raise ModelHTTPError(f"no answer within {timeout:g} s", timed_out=True) from None
        except (OSError, ssl.SSLError) as exc:
            raise ModelHTTPError(f"{type(exc).__name__}: {exc}") from None

    async def _connection(self, origin: tuple[str, str, int]) -> tuple[_Connection, bool]:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if conn.usable():
                return conn, True
            conn.close()
        scheme, hostname, port = origin
        reader, writer = await _open_allowed(scheme, hostname, port)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            import socket

            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer), False

    async def _exchange(self, conn: _Connection, payload: bytes) -> tuple[Response, bool]:
        import httptools

        parsed = _Parsed()
        parser = parsed.parser = httptools.HttpResponseParser(parsed)
        try:
            conn.writer.write(payload)
            await conn.writer.drain()
        except (ConnectionError, OSError):
            raise _Stale from None
        while not parsed.complete:
            try:
                data = await conn.reader.read(READ_CHUNK)
            except (ConnectionError, OSError):
                if not parsed.started:
                    raise _Stale from None
                raise
            if not data:
                if not parsed.started:
                    raise _Stale
                with contextlib.suppress(httptools.HttpParserError):
                    parser.feed_data(b"")  # a body that ends with the connection
                if parsed.complete:
                    break
                raise ModelHTTPError("the server closed the connection in the middle of its answer")
            try:
                parser.feed_data(data)
            except httptools.HttpParserUpgrade:  # pragma: no cover - never asked for
                raise ModelHTTPError("the server switched protocols") from None
            except httptools.HttpParserError as exc:
                raise ModelHTTPError(f"the server's answer is no HTTP/1.1: {exc}") from None
        response = Response(parser.get_status_code(), parsed.headers, b"".join(parsed.body))
        return response, parsed.keep_alive

    async def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


class _Stale(Exception):
    """The connection was closed before any answer came (safe to send again on a new one)."""


async def _allowed_addresses(url: str) -> list[str] | None:
    """The addresses `url` may be reached at, checked against STUDIO_ENDPOINT_ALLOWED_HOSTS
    (None: allowed by name, connect to it as it is); ModelHTTPError naming the setting for
    a host endpoints may not reach, before any connection is opened."""
    from studio.services import endpoint_hosts

    try:
        return await endpoint_hosts.addresses_to_connect(url)
    except endpoint_hosts.HostNotAllowed as exc:
        raise ModelHTTPError(str(exc)) from None


async def _open_allowed(
    scheme: str, hostname: str, port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to an allowed host: to the very addresses that were checked (the name
    is not resolved a second time, when it might answer otherwise), the first that answers."""
    tls = _tls() if scheme == "https" else None
    url = f"{scheme}://{hostname if ':' not in hostname else f'[{hostname}]'}:{port}/"
    addresses = await _allowed_addresses(url)
    if addresses is None:
        return await asyncio.open_connection(hostname, port, ssl=tls, limit=READ_CHUNK)
    failed: OSError | None = None
    for address in addresses:
        try:
            return await asyncio.open_connection(
                address, port, ssl=tls, server_hostname=hostname if tls else None,
                limit=READ_CHUNK,
            )  # fmt: skip
        except OSError as exc:
            failed = exc
    assert failed is not None  # addresses_to_connect never returns an empty list
    raise failed


class _HttpxClient:
    """The same interface over httpx (which honours the proxy settings)."""

    def __init__(self) -> None:
        import httpx

        self._client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=512)
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def request(self, method, url, *, body=None, headers=None, timeout: float) -> Response:
        import httpx

        # checked on every request: the proxy connects, so no connection of ours to check
        await _allowed_addresses(url)
        try:
            response = await self._client.request(
                method, url, content=body, headers=headers, timeout=timeout
            )
        except httpx.TimeoutException:
            raise ModelHTTPError(f"no answer within {timeout:g} s", timed_out=True) from None
        except httpx.TransportError as exc:
            raise ModelHTTPError(f"{type(exc).__name__}: {exc}") from None
        return Response(
            response.status_code,
            {k.lower(): v for k, v in response.headers.items()},
            response.content,
        )


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def client() -> Client | _HttpxClient:
    """The running event loop's client."""
    loop = asyncio.get_running_loop()
    found = _clients.get(loop)
    if found is None:
        try:
            import httptools  # noqa: F401 - uvicorn[standard]'s parser

            found = _HttpxClient() if proxied() else Client()
        except ImportError:  # pragma: no cover - uvicorn without its standard extra
            found = _HttpxClient()
        _clients[loop] = found
        from studio.serving.loop_close import at_loop_close

        at_loop_close(found.close)
    return found
