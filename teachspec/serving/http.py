"""Asking a server over HTTP within a deadline: a whole reply, in bounded time and size, or an error that says why.

urllib's `timeout` bounds each read from the socket, not the request. A server that sends its headers and then one
byte a second never times out, since every single read returns within the timeout, and a caller waits as long as
the server likes. `fetch` bounds the whole exchange instead:

    deadline    connecting, sending, the headers and the body all end within `timeout` seconds of the call: the
                body is read in chunks with the socket's timeout set to what is left of the deadline, and a watchdog
                shuts the connection when the deadline passes (headers that trickle in are cut off too)
    size        a body longer than `limit` bytes is refused, at once when its Content-Length says so
    whole       a body cut short (fewer bytes than its Content-Length) is an error, never a shorter body

Each failure raises the caller's own error class (ServerError for the API, MetricsError for /metrics) with the
URL, the bytes received so far and the seconds waited. `json_of` reads a body as JSON with the same care (bytes
that are not UTF-8, not JSON, or nested too deeply to parse), and `quote` shows the start of what a server sent,
so that every error about a reply also says what the reply was.

The connection is made directly, with no proxy: the servers asked are the ones teachspec starts, on this machine.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

CHUNK = 64 * 1024  # bytes asked of the socket per read: one read waits at most what is left of the deadline


@dataclass(frozen=True, slots=True)
class Reply:
    """What a server answered: its HTTP status and the whole body, `seconds` after the request was made."""
    url: str
    status: int
    body: bytes
    seconds: float


def fetch(url: str, data: bytes | None = None, *, timeout: float, limit: int, error: type[Exception],
          hint: str = "", headers: dict[str, str] | None = None) -> Reply:
    """GET `url` (POST `data` as JSON when given) and read the whole reply within `timeout` seconds and `limit`
    bytes. Any status comes back as a Reply (the caller knows what a 400 means for it); a failure raises
    `error(message)`, and `hint` is added to the message when nothing answers at all. `headers` are sent besides
    the JSON ones (an `Authorization: Bearer KEY` for a server started with an API key)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise error(f"{url!r} is not an http:// or https:// URL")
    start = time.monotonic()
    deadline = start + timeout
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname, parts.port, timeout=timeout)
    body = bytearray()
    stage = "connecting"
    cut = threading.Event()   # set by the watchdog: a read that fails after it is late, not broken
    watchdog = None
    late = f"did not finish its reply within the {timeout:g} s allowed"

    def failed(what: str) -> Exception:
        n = len(body)
        got = f"{n:,} byte{'s' * (n != 1)} of its body" if stage == "reading its body" else "no body yet"
        return error(f"{url} {what} ({stage}; {got} after {time.monotonic() - start:.1f} s)")

    try:
        connection.connect()  # one operation: the socket's timeout bounds it
        sock = connection.sock  # kept: the connection forgets it once a reply that closes it has begun
        watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), _shut, (sock, cut))
        watchdog.daemon = True
        watchdog.start()
        stage = "sending the request"
        sent = {"Content-Type": "application/json", "Accept": "application/json, text/plain", **(headers or {})}
        path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        connection.request("GET" if data is None else "POST", path, body=data, headers=sent)
        stage = "waiting for its headers"
        response = connection.getresponse()
        if cut.is_set():  # the watchdog's shutdown reads as the end of the headers: they were cut off
            raise failed(late)
        if response.length is not None and response.length > limit:
            raise failed(f"announced a reply of {response.length:,} bytes, more than the {limit:,} accepted")
        stage = "reading its body"
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise failed(late)
            sock.settimeout(left)
            chunk = response.read1(CHUNK)
            if not chunk:
                break
            body += chunk
            if len(body) > limit:
                raise failed(f"sent a reply longer than the {limit:,} bytes accepted")
        if cut.is_set():  # a body without a Content-Length ends where the watchdog cut it: not the whole body
            raise failed(late)
        if response.length:  # the connection ended with bytes still owed: a body cut short
            raise failed(f"closed the connection {response.length:,} bytes before the end of its reply")
        return Reply(url, response.status, bytes(body), time.monotonic() - start)
    except http.client.IncompleteRead:
        raise failed(late if cut.is_set() else "closed the connection before the end of its reply") from None
    except (http.client.HTTPException, OSError) as e:  # TimeoutError is an OSError
        if cut.is_set() or isinstance(e, TimeoutError):
            raise failed(late) from None
        if stage == "connecting":
            raise error(f"nothing answers at {url} ({getattr(e, 'strerror', None) or e}){hint}") from None
        raise failed(f"broke off the exchange: {type(e).__name__}: {e}") from None
    finally:
        if watchdog is not None:
            watchdog.cancel()
        connection.close()


def _shut(sock: socket.socket, cut: threading.Event) -> None:
    """The deadline passed: wake whatever read is blocked on the socket (shutdown does; close would not)."""
    cut.set()
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # closed already: the exchange ended as the deadline passed
        pass


def json_of(reply: Reply, error: type[Exception]) -> Any:
    """The body as JSON, or `error` naming the URL and quoting the body: not UTF-8, not JSON, nested too deeply."""
    try:
        text = reply.body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{reply.url} sent bytes that are not UTF-8 text (byte {e.start:,} is {reply.body[e.start]:#04x}):"
                    f" {quote(reply.body)}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{reply.url} sent something that is not JSON ({e.msg} at character {e.pos:,}): "
                    f"{quote(reply.body)}") from None
    except RecursionError:  # json parses nesting by recursion: 200,000 "[" exhaust the stack
        raise error(f"{reply.url} sent JSON nested too deeply to read: {quote(reply.body)}") from None


def quote(body: bytes | str, n: int = 200) -> str:
    """The first `n` bytes of what a server sent, as an error shows them: text as a string literal (control
    characters appear as escapes), anything that is not UTF-8 as a bytes literal, with the whole length when that
    was not all of it."""
    data = body.encode("utf-8", errors="replace") if isinstance(body, str) else bytes(body)
    if not data:
        return "nothing (an empty body)"
    head = data[:n]
    for cut in range(4):  # the nth byte may fall inside a character: that alone does not make the body binary
        try:
            shown = repr(head[:len(head) - cut].decode("utf-8"))
            break
        except UnicodeDecodeError:
            continue
    else:
        shown = repr(head)
    return shown if len(data) <= n else f"{shown}... ({len(data):,} bytes in all)"
