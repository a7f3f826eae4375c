"""A client for a server or a cluster's router: one completion as a stream, and a closed loop of many.

Two numbers show a router's policy at work: the prompt tokens a replica had cached, and the time to the first token
(TTFT), which is mostly the prefill of what was not cached. `complete` asks /v1/completions for a stream (`"stream":
true`) and reads the server-sent events as they arrive, greedy (`temperature: 0`):

    data: {"id": "cmpl-ID", "model": M, "choices": [{"text": " s", "token_ids": [298], ...}]}     one per step
    ...
    data: {"id": "cmpl-ID", "model": M, "choices": [], "usage": {"prompt_tokens": 9,
           "prompt_tokens_details": {"cached_tokens": 0}, ...}}                                   stream_options
    data: [DONE]

TTFT runs from sending to the first event that carries a token. The request is named by `X-Request-Id: ID` (vLLM
calls it cmpl-ID) and, given a session, sent with `x-session-id: SESSION`, the key the router's consistent_hash
hashes. M, the model that answered, is kept as `served_by`: in a cluster each replica serves its own copy, so it says
which replica wrote the reply (cluster.py, `Cluster.routes`).

Every read is bounded as fetch bounds one (serving/http.py): the whole exchange ends within `timeout` seconds (a
watchdog shuts the socket at the deadline, so a server that trickles a byte a second is cut off too), a line may not
pass LINE_LIMIT bytes nor the stream STREAM_LIMIT. A stream that ends before `data: [DONE]` is an error, never a
shorter answer: it is what a replica killed mid-reply looks like through a router. An event that is not JSON, or
JSON of the wrong shape (token ids that are not whole numbers, a cached count above the prompt's), is a ServerError
that names the server and quotes the event.

`run_all` sends a list of `Ask`s through `concurrency` threads, each sending its next one as soon as its last one is
answered (a closed loop: the load is `concurrency` requests in flight, never more), all within one `deadline`. The
results come back in the order asked, one per request: its Completion, or the exception that ended it. `retries`
sends a failed request again (a cut stream, a refusal) while the deadline allows: a request that a killed replica
dropped then finishes on another, and still has one answer, never two.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import threading
import time
import urllib.parse
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from teachspec.serving.http import Reply, _shut, fetch, json_of, quote
from teachspec.serving.launch import ServerError
from teachspec.serving.remote import _short, _whole_numbers

LINE_LIMIT = 1024 * 1024          # bytes in one event: a step's few tokens, or the first event with the prompt's ids
STREAM_LIMIT = 64 * 1024 * 1024   # bytes in a whole stream
ERROR_LIMIT = 64 * 1024           # bytes of a refusal's body
RETRY_PAUSE = 2.0                 # seconds before a failed request is sent again


@dataclass(frozen=True, slots=True)
class Completion:
    """One request's answer: what was generated, what the replica had cached, and how long it took."""
    request_id: str
    text: str
    token_ids: list[int]
    prompt_tokens: int
    cached_tokens: int           # prompt tokens the server took from its prefix cache
    ttft_s: float | None         # sending -> the first generated token (None: not streamed, so not seen)
    total_s: float               # sending -> [DONE]
    served_by: str = ""          # the model named in the reply: in a cluster, which replica answered
    finish_reason: str | None = None  # "length" (max_tokens reached) or "stop" (an end of text)


@dataclass(frozen=True, slots=True)
class Ask:
    """One request for run_all to send."""
    request_id: str
    prompt: str | list[int]      # text, or token ids
    max_tokens: int
    session: str | None = None   # the tenant or conversation: sent as x-session-id
    stream: bool = True          # False: the whole reply at once (see complete)


def complete(url: str, prompt: str | list[int], max_tokens: int, *, request_id: str, session: str | None = None,
             timeout: float = 120.0, api_key: str | None = None, stream: bool = True) -> Completion:
    """Stream one greedy completion of `prompt` (text, or token ids) from `url` (a vLLM server or a router), within
    `timeout` seconds.

    stream=False asks for the whole reply at once: no time to the first token (ttft_s is None), but a router then
    counts the request in flight until it is answered. vllm-router 0.1.17 counts a request as its worker's load only
    until the reply begins, so streamed requests leave every load near 0, and cache_aware's least-loaded choice for
    a new prefix falls to the first worker every time: measured here, 9 of 10 tenants on one of two replicas
    streamed, 6 and 4 not streamed (teachspec/bench/README.md)."""
    for name, value in (("request_id", request_id), ("session", session), ("api_key", api_key)):
        if (value is not None or name == "request_id") and not _header_value(value):
            raise ValueError(f"{name} must be a non-empty string of printable characters without spaces at its ends "
                             f"(it is sent in an HTTP header), got {value!r}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    where = url.rstrip("/") + "/v1/completions"
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": stream,
            "return_token_ids": True, "include_stop_str_in_output": True, "skip_special_tokens": False}
    if stream:
        body["stream_options"] = {"include_usage": True}
    headers = {"X-Request-Id": request_id}
    if session is not None:
        headers["x-session-id"] = session
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    if not stream:  # one object shaped as a stream's events together (its choices, its usage): read as one
        reply = fetch(where, json.dumps(body).encode(), timeout=timeout, limit=STREAM_LIMIT, error=ServerError,
                      headers=headers)
        if reply.status != 200:
            raise _refusal(where, reply.status, reply.body, headers)
        whole = _read(iter([(reply.body, reply.seconds), (b"[DONE]", reply.seconds)]), where, request_id)
        return dataclasses.replace(whole, ttft_s=None)
    with closing(events(where, json.dumps(body).encode(), headers, timeout)) as events_of:  # closed on any error
        return _read(events_of, where, request_id)


def _read(stream: Iterator[tuple[bytes, float]], where: str, request_id: str) -> Completion:
    """A Completion from a stream's events, each checked as it comes."""
    text, tokens, ttft, served, finish, usage = [], [], None, None, None, None
    for data, seconds in stream:
        if data == b"[DONE]":
            if usage is None:
                raise ServerError(f"{where} ended its stream for {request_id!r} without a usage event (asked for "
                                  f"with stream_options.include_usage)")
            prompt_tokens, cached = usage
            return Completion(request_id, "".join(text), tokens, prompt_tokens, cached,
                              seconds if ttft is None else ttft, seconds, served or "", finish)
        event = json_of(Reply(where, 200, data, seconds), ServerError)
        if not isinstance(event, dict) or "error" in event:
            raise ServerError(f"{where} sent an error, or an event that is not an object, for {request_id!r}: "
                              f"{quote(data)}")
        model = event.get("model")
        if not isinstance(model, str) or (served is not None and model != served):
            raise ServerError(f"{where} sent an event whose model is {_short(model)}, not the {_short(served)} of "
                              f"the ones before: {quote(data)}")
        served = model
        for choice in _choices(event, where, data):
            piece, ids = choice.get("text"), choice.get("token_ids")
            if not isinstance(piece, str) or not _whole_numbers(ids):
                raise ServerError(f"{where} sent a choice without text and token_ids (a list of whole numbers; "
                                  f"asked for with return_token_ids): {quote(data)}")
            text.append(piece)
            tokens += ids
            if ids and ttft is None:
                ttft = seconds
            finish = choice.get("finish_reason") or finish
        if event.get("usage") is not None:
            usage = _usage(event["usage"], where, data)
    raise ServerError(f"{where} ended its stream for {request_id!r} without data: [DONE]")


def events(where: str, data: bytes, headers: dict[str, str], timeout: float) -> Iterator[tuple[bytes, float]]:
    """POST `data` as JSON to `where` and yield each server-sent event's data (b"[DONE]" last) with the seconds since
    sending; the whole exchange within `timeout` seconds, each line within LINE_LIMIT bytes and the stream within
    STREAM_LIMIT. A refusal (any status but 200) is a ServerError quoting it; so is a stream that ends early."""
    parts = urllib.parse.urlsplit(where)
    if parts.scheme != "http" or not parts.hostname:
        raise ServerError(f"{where!r} is not an http:// URL")
    start = time.monotonic()
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    cut, watchdog, read, stage = threading.Event(), None, 0, "connecting"
    late = f"did not finish its stream within the {timeout:g} s allowed"

    def failed(what: str) -> ServerError:
        return ServerError(f"{where} {what} ({stage}; {read:,} bytes of the stream after "
                           f"{time.monotonic() - start:.1f} s)")

    try:
        connection.connect()
        sock = connection.sock
        watchdog = threading.Timer(max(0.0, start + timeout - time.monotonic()), _shut, (sock, cut))
        watchdog.daemon = True
        watchdog.start()
        stage = "sending the request"
        connection.request("POST", parts.path, body=data, headers={"Content-Type": "application/json",
                                                                   "Accept": "text/event-stream", **headers})
        stage = "waiting for its headers"
        response = connection.getresponse()
        if response.status != 200:
            stage = "reading its refusal"
            raise _refusal(where, response.status, response.read(ERROR_LIMIT), headers)
        stage = "reading its stream"
        while True:
            left = start + timeout - time.monotonic()
            if left <= 0 or cut.is_set():
                raise failed(late)
            sock.settimeout(left)
            line = response.readline(LINE_LIMIT + 1)
            read += len(line)
            if not line:  # the end of the stream, or the watchdog's shutdown
                raise failed(late if cut.is_set() else "closed the stream before its end (no data: [DONE])")
            if len(line) > LINE_LIMIT or read > STREAM_LIMIT:
                raise failed(f"sent a line longer than {LINE_LIMIT:,} bytes, or a stream longer than "
                             f"{STREAM_LIMIT:,}")
            if line.startswith(b"data:"):  # other lines: blank separators, comments (": ..."), event names
                payload = line[5:].strip()
                yield payload, time.monotonic() - start
                if payload == b"[DONE]":
                    return
    except http.client.IncompleteRead:  # a chunked stream cut off: the server (or the router) went away
        raise failed(late if cut.is_set() else "closed the stream before its end (a chunk cut short)") from None
    except (http.client.HTTPException, OSError) as e:
        if cut.is_set() or isinstance(e, TimeoutError):
            raise failed(late) from None
        if stage == "connecting":
            raise ServerError(f"nothing answers at {where} ({getattr(e, 'strerror', None) or e})") from None
        raise failed(f"broke off the exchange: {type(e).__name__}: {e}") from None
    finally:
        if watchdog is not None:
            watchdog.cancel()
        connection.close()


def run_all(url: str, requests: Sequence[Ask], concurrency: int = 4, deadline: float = 600.0, *, retries: int = 0,
            timeout: float = 120.0, api_key: str | None = None, spacing: float = 0.0,
            on_result: Callable[[int, Completion | Exception], None] | None = None) -> list[Completion | Exception]:
    """Send every Ask to `url` from `concurrency` threads in a closed loop, all within `deadline` seconds; each
    request within `timeout` (and what is left of the deadline), sent again up to `retries` times after a
    ServerError. Returns one result per Ask, in order: a Completion, or the exception that ended it.
    `spacing` is the least time between two requests' sending, which then go in the order asked: with 0 each goes as
    soon as a thread is free, so requests that one batch answered together (and the first `concurrency`) reach the
    server in whatever order their threads run; a few milliseconds keep them in order, and a round robin router
    then deals them out as asked.
    `on_result(i, result)` is called on the sending thread as each one ends (it should not raise)."""
    ids = [ask.request_id for ask in requests]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"request ids must be unique (one answer each), got {repeated[:5]} more than once")
    for name, value, low in (("concurrency", concurrency, 1), ("retries", retries, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if isinstance(spacing, bool) or not isinstance(spacing, (int, float)) or not 0 <= spacing <= 1:
        raise ValueError(f"spacing must be a number of seconds from 0 to 1 (between two requests' sending), got "
                         f"{spacing!r}")
    end = time.monotonic() + deadline
    results: list[Completion | Exception | None] = [None] * len(requests)
    taken = iter(range(len(requests)))
    lock = threading.Lock()
    last = [-float("inf")]  # when the request taken last is due to be sent

    def one(ask: Ask) -> Completion | Exception:
        error: Exception | None = None
        for attempt in range(retries + 1):
            if attempt:  # a moment for the router to notice what failed (its health check runs every second)
                time.sleep(min(RETRY_PAUSE, max(0.0, end - time.monotonic())))
            left = end - time.monotonic()
            if left <= 0:
                return error or ServerError(f"request {ask.request_id!r} was not sent: the run's deadline of "
                                            f"{deadline:g} s had passed")
            try:
                return complete(url, ask.prompt, ask.max_tokens, request_id=ask.request_id, session=ask.session,
                                timeout=min(timeout, left), api_key=api_key, stream=ask.stream)
            except ServerError as e:
                error = e
            except Exception as e:  # a bad Ask: not worth sending again
                return e
        return error

    def loop() -> None:
        while True:
            with lock:  # the next request and its time to go, each after the last one's by `spacing`
                i = next(taken, None)
                due = last[0] = max(time.monotonic(), last[0] + spacing)
            if i is None:
                return
            time.sleep(max(0.0, due - time.monotonic()))
            results[i] = one(requests[i])
            if on_result is not None:
                on_result(i, results[i])

    threads = [threading.Thread(target=loop, name=f"client-{n}", daemon=True)
               for n in range(min(concurrency, len(requests)))]
    for thread in threads:
        thread.start()
    for thread in threads:  # each request ends by the deadline; the margin is for on_result
        thread.join(max(0.0, end - time.monotonic()) + 30.0)
    return [r if r is not None else ServerError(f"request {ask.request_id!r} had no answer when the run ended")
            for r, ask in zip(results, requests)]


# ----------------------------------------------------------------------------------------------------------------

def _refusal(where: str, status: int, body: bytes, headers: dict[str, str]) -> ServerError:
    """What a reply with a status other than 200 says, as an error to raise."""
    if status == 401:  # vLLM's answer to a missing or wrong key: say which
        said = "refused the API key it was given" if "Authorization" in headers else "needs an API key"
        return ServerError(f"{where} {said} (HTTP 401): pass the key the servers were started with (api_key=KEY); "
                           f"it sent {quote(body, 300)}")
    return ServerError(f"{where} refused the request (HTTP {status}): {quote(body, 300)}")


def _header_value(value: Any) -> bool:
    return isinstance(value, str) and bool(value) and value.isprintable() and value == value.strip()


def _choices(event: dict, where: str, data: bytes) -> list[dict]:
    """An event's choices: a list of objects (the usage event's is empty)."""
    choices = event.get("choices")
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise ServerError(f"{where} sent an event whose choices are not a list of objects: {quote(data)}")
    return choices


def _usage(usage: Any, where: str, data: bytes) -> tuple[int, int]:
    """(prompt tokens, cached tokens) from a usage event, each checked: cached is a part of the prompt."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    cached = (details.get("cached_tokens") or 0) if isinstance(details, dict) else 0 if details is None else None
    if not _whole_numbers([prompt, cached]) or cached > prompt:
        raise ServerError(f"{where} sent a usage without prompt_tokens and a cached_tokens from 0 to it: "
                          f"{quote(data)}")
    return prompt, cached
