"""A server that misbehaves gets a named error, in bounded time: never a hang, a raw crash or a silent wrong answer.

An HTTP server of the test's own on 127.0.0.1 answers RemoteEngine and metrics.read with replies that trickle in a
byte a second, stop short, or have the wrong shape; each must end in a ServerError (MetricsError for /metrics)
that names the URL and quotes what the server sent. The watcher is fed KV-event batches made by hand, straight into
its receive function and through a real ZMQ socket, and must refuse what a trace could not hold."""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
import warnings

import msgpack
import pytest
import zmq

from teachspec.events import EventLog, Insert
from teachspec.serving import EventStreamError, MetricsError, RemoteEngine, ServerError, Watcher, metrics, watch
from teachspec.serving.http import fetch

B = 4  # block size of the hand-made KV events


class Pair:
    """Just what RemoteEngine asks of a pair: a tokenizer both sides would share."""
    name, eos, tokenizer = "stub", 0, None

    def encode(self, text: str, special: bool = True) -> list[int]:
        return [ord(c) % 50 + 1 for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(97 + i % 26) for i in ids)


# -- a server that answers as a script says -------------------------------------------------------------------------

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.server.script(self)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))  # read it all: closing on unread bytes resets
        self.server.script(self)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    """`serve(script)` -> the URL of a server on 127.0.0.1 whose every request is answered by `script(handler)`."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.stop = threading.Event()  # ends a trickle once the test is done with it
    # a short poll: shutdown() waits for one, and every test ends with it
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()

    def serve(script) -> str:
        httpd.script = script
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    yield serve
    httpd.stop.set()
    httpd.shutdown()
    httpd.server_close()


def reply(body: bytes | str, status: int = 200, length: int | None = None, announce: bool = True):
    """A script that sends `body` whole (or announces `length` bytes and sends only these; or announces no length,
    and the end of the connection ends the body)."""
    data = body.encode() if isinstance(body, str) else body

    def script(h):
        h.send_response(status)
        if announce:
            h.send_header("Content-Length", str(len(data) if length is None else length))
        h.end_headers()
        h.wfile.write(data)
    return script


def trickle(h):
    """Headers at once, then a byte a second of a body that never ends in time."""
    h.send_response(200)
    h.send_header("Content-Length", "1000")
    h.end_headers()
    while not h.server.stop.wait(1.0):
        try:
            h.wfile.write(b" ")
        except OSError:  # the client gave up: as it should
            return


def trickle_headers(h):
    """Even the headers come a byte a second: the deadline must hold before the body has begun."""
    h.wfile.write(b"HTTP/1.0 200 OK\r\n")
    for byte in b"X-Slow: " + b"a" * 60:
        if h.server.stop.wait(1.0):
            return
        try:
            h.wfile.write(bytes([byte]))
        except OSError:
            return


def engine(url: str, timeout: float = 5.0) -> RemoteEngine:
    return RemoteEngine(url, Pair(), model="m", timeout=timeout)  # a model given: /v1/models is not asked


def generated(ids: list[int], **usage) -> str:
    out = {"choices": [{"index": 0, "text": "", "token_ids": ids, "finish_reason": "length"}]}
    if usage:
        out["usage"] = {"prompt_tokens_details": usage}
    return json.dumps(out)


def scored(index_key: str = "index", rows=None) -> str:
    rows = rows if rows is not None else [None, {"2": {"logprob": -0.5}}, {"5": {"logprob": -1.0}},
                                          {"6": {"logprob": -2.0}}]
    return json.dumps({"choices": [{index_key: 0, "text": "", "prompt_logprobs": rows}]})


def raises_naming(error, url: str, body: bytes | str, call):
    """`call()` raises `error`, whose message names `url` and quotes the start of `body`; returns the message."""
    with pytest.raises(error) as caught:
        call()
    message = str(caught.value)
    assert url in message, message
    data = body.encode() if isinstance(body, str) else body
    try:
        start = repr(data[:40].decode("utf-8"))[1:-1]  # as the error quotes text: a literal, less its quotes
    except UnicodeDecodeError:
        start = repr(data[:40])[2:-1]                  # and bytes that are not text as a bytes literal
    assert start in message, message
    return message


# -- the right replies are taken: the checks below refuse only what is wrong ---------------------------------------

def test_well_formed_replies_are_read(server):
    url = server(reply(generated([3, 4, 5], cached_tokens=2)))
    g = engine(url).generate([1, 2, 3], max_new_tokens=3)
    assert g.tokens == [3, 4, 5] and g.stats.cached_tokens == 2 and g.finish_reason == "length"
    server(reply(scored()))
    [s] = engine(url).score([1, 2], [[5, 6]])
    assert s.tokens == [5, 6] and s.logprobs == [-1.0, -2.0]
    server(reply(json.dumps({"data": [{"id": "target"}]})))
    assert RemoteEngine(url, Pair()).model == "target"
    server(reply("vllm:spec_decode_num_drafts_total 4.0\nvllm:gpu_cache_usage_perc NaN\n"))
    assert metrics.counters(metrics.read(url))["drafts"] == 4  # a gauge may be NaN; only counters must count


# -- a server started with an API key -----------------------------------------------------------------------------

def guarded(key: str, body: str):
    """A script that answers as vLLM does with --api-key: 401 to /v1 without `Bearer key`, /metrics open to all."""
    def script(h):
        if h.path.startswith("/v1") and h.headers.get("Authorization") != f"Bearer {key}":
            reply('{"error": "Unauthorized"}', status=401)(h)
        else:
            reply(body)(h)
    return script


def test_a_key_gets_through_a_guarded_server_and_no_key_or_a_wrong_one_is_said(server, monkeypatch):
    monkeypatch.delenv("TEACHSPEC_API_KEY", raising=False)
    url = server(guarded("s3cret", generated([3, 4])))
    with_key = RemoteEngine(url, Pair(), model="m", timeout=5, api_key="s3cret")
    assert with_key.generate([1, 2], max_new_tokens=2).tokens == [3, 4]
    with pytest.raises(ServerError, match=r"/v1/completions needs an API key and none was given \(HTTP 401\)"):
        engine(url).generate([1, 2], max_new_tokens=2)
    wrong = RemoteEngine(url, Pair(), model="m", timeout=5, api_key="guess")
    with pytest.raises(ServerError, match=r"refused the API key it was given \(HTTP 401\).*Unauthorized"):
        wrong.generate([1, 2], max_new_tokens=2)
    monkeypatch.setenv("TEACHSPEC_API_KEY", "s3cret")  # what `teachspec serve` was given: a URL alone takes it
    assert engine(url).generate([1, 2], max_new_tokens=2).tokens == [3, 4]
    server(guarded("s3cret", "vllm:spec_decode_num_drafts_total 4.0\n"))
    assert metrics.counters(metrics.read(url))["drafts"] == 4  # vLLM guards /v1 only: /metrics needs no key


@pytest.mark.parametrize("key", ["", "two\nlines", 5])
def test_a_key_that_cannot_be_a_header_is_refused_before_any_request(key):
    with pytest.raises(ValueError, match="api_key must be a non-empty string"):
        RemoteEngine("http://127.0.0.1:9", Pair(), model="m", api_key=key)


# -- (a) a reply that never ends in time ---------------------------------------------------------------------------

@pytest.mark.parametrize("script", [trickle, trickle_headers], ids=["body", "headers"])
def test_a_trickling_server_is_given_up_on_at_the_deadline(server, script):
    url = server(script)
    for call, error in ((lambda: engine(url, timeout=2).generate([1, 2], max_new_tokens=4), ServerError),
                        (lambda: metrics.read(url, timeout=2), MetricsError)):
        t0 = time.monotonic()
        with pytest.raises(error) as caught:
            call()
        elapsed = time.monotonic() - t0
        message = str(caught.value)
        assert elapsed < 6, f"waited {elapsed:.1f} s for a 2 s timeout"
        assert url in message and "within the 2 s allowed" in message and " s)" in message, message
        if script is trickle:
            assert "of its body after 2" in message, message
        else:
            assert "waiting for its headers" in message, message


def test_a_reply_longer_than_the_limit_is_refused_before_it_is_read(server):
    url = server(reply(b"x" * 10, length=10 ** 12))
    with pytest.raises(ServerError, match=r"announced a reply of 1,000,000,000,000 bytes, more than the 100"):
        fetch(url, timeout=5, limit=100, error=ServerError)
    server(reply(b"x" * 1000, announce=False))  # no length said: the bytes are counted as they come
    with pytest.raises(ServerError, match="longer than the 100 bytes accepted"):
        fetch(url, timeout=5, limit=100, error=ServerError)


def test_nothing_listening_is_said_with_the_hint():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(MetricsError, match=f"nothing answers at http://127.0.0.1:{port}/metrics .*running there"):
        metrics.read(f"http://127.0.0.1:{port}", timeout=2)


# -- (b) replies of the wrong shape ---------------------------------------------------------------------------------

NESTED = "[" * 200_000 + "]" * 200_000

GENERATE = {
    "no choices": ('{"choices": []}', "without choices"),
    "choices a number": ('{"choices": 5}', "without choices"),
    "a list": ("[]", "not an object"),
    "null": ("null", "not an object"),
    "nested too deeply": (NESTED, "nested too deeply"),
    "not JSON": ('{"choices": [', "not JSON"),
    "no token_ids": ('{"choices": [{"index": 0, "text": "hi"}]}', "no token_ids"),
    "token_ids not ids": (generated(["a", None]), "no token_ids"),
    "not UTF-8": (b'\xff\xfe{"choices": []}', "not UTF-8"),
    "cached below 0": (generated([3], cached_tokens=-3), "cached_tokens -3"),
    "cached infinite": (generated([3], cached_tokens=1e999), "cached_tokens Infinity"),
    "cached NaN": (generated([3], cached_tokens=float("nan")), "cached_tokens NaN"),
    "cached beyond the prompt": (generated([3], cached_tokens=50), "from 0 to the 3 tokens"),
    "usage a string": ('{"choices": [{"index": 0, "token_ids": [1]}], "usage": "lots"}', "usage"),
}


@pytest.mark.parametrize("body, says", GENERATE.values(), ids=GENERATE)
def test_generate_refuses_a_malformed_reply(server, body, says):
    url = server(reply(body))
    message = raises_naming(ServerError, url + "/v1/completions", body,
                            lambda: engine(url).generate([1, 2, 3], max_new_tokens=4))
    assert says in message


def test_generate_refuses_a_body_cut_short(server):
    body = generated([3, 4])
    url = server(reply(body[:10], length=len(body)))
    message = raises_naming(ServerError, url, "", lambda: engine(url).generate([1, 2, 3]))
    assert f"{len(body) - 10:,} bytes before the end of its reply" in message and "10 bytes of its body" in message


def test_an_http_error_quotes_the_servers_complaint(server):
    body = '{"error": {"message": "max_tokens is too large"}}'
    url = server(reply(body, status=400))
    message = raises_naming(ServerError, url, body, lambda: engine(url).generate([1, 2, 3]))
    assert "HTTP 400" in message


SCORE = {
    "no index": (scored(index_key="number"), "scored the continuations [null]"),
    "none scored": ('{"choices": []}', "without choices"),
    "a list": ("[]", "not an object"),
    "index out of range": (scored().replace('"index": 0', '"index": 3'), "scored the continuations [3]"),
    "no prompt_logprobs": ('{"choices": [{"index": 0}]}', "no prompt_logprobs"),
    "token missing": (scored(rows=[None, {"2": {}}, {"9": {"logprob": -1}}, {"6": {"logprob": -2}}]),
                      "no log probability (a number, not NaN) of token 5 at prompt position 2"),
    "log probability NaN": (scored(rows=[None, {}, {"5": {"logprob": float("nan")}}, {"6": {"logprob": -2}}]),
                            "got NaN"),
}


@pytest.mark.parametrize("body, says", SCORE.values(), ids=SCORE)
def test_score_refuses_a_malformed_reply(server, body, says):
    url = server(reply(body))
    message = raises_naming(ServerError, url + "/v1/completions", body, lambda: engine(url).score([1, 2], [[5, 6]]))
    assert says in message


def test_score_refuses_a_reply_that_scores_one_continuation_of_two(server):
    url = server(reply(scored()))
    message = raises_naming(ServerError, url, scored(), lambda: engine(url).score([1, 2], [[5, 6], [7]]))
    assert "2 were asked" in message


MODELS = {
    "data a number": ('{"data": 5}', "lists no model"),
    "no data": ('{"object": "list"}', "lists no model"),
    "a model without an id": ('{"data": [{}]}', "without a name"),
    "not UTF-8": (b'\x80\x81{"data": []}', "not UTF-8"),
}


@pytest.mark.parametrize("body, says", MODELS.values(), ids=MODELS)
def test_the_models_list_refuses_a_malformed_reply(server, body, says):
    url = server(reply(body))
    message = raises_naming(ServerError, url + "/v1/models", body, lambda: RemoteEngine(url, Pair()))
    assert says in message


METRICS = {
    "NaN counter": ("vllm:spec_decode_num_drafts_total NaN\n", "finite number >= 0, got nan"),
    "infinite counter": ("vllm:prefix_cache_hits_total +Inf\n", "finite number >= 0, got inf"),
    "negative counter": ('vllm:request_success_total{finished_reason="stop"} -2.0\n', "got -2.0"),
    "not a number": ("vllm:spec_decode_num_drafts_total many\n", "not a number"),
    "not UTF-8": (b"\xff\xfe vllm", "not text"),
    "HTTP 500": ("internal error", "HTTP 500"),
}


@pytest.mark.parametrize("body, says", METRICS.values(), ids=METRICS)
def test_metrics_refuse_a_malformed_reply(server, body, says):
    url = server(reply(body, status=500 if body == "internal error" else 200))
    message = raises_naming(MetricsError, url + "/metrics", body, lambda: metrics.read(url, timeout=2))
    assert says in message


@pytest.mark.parametrize("samples, says", [
    ({"vllm:spec_decode_num_drafts": [({}, float("nan"))]}, "vllm:spec_decode_num_drafts: a counter must be"),
    ({"vllm:spec_decode_num_accepted_tokens_per_pos_total": [({"position": "x"}, 1.0)]}, "position='x'"),
    ({"vllm:spec_decode_num_accepted_tokens_per_pos_total": [({"position": "99999999"}, 1.0)]}, "from 0 to 1023"),
    ({"vllm:prefix_cache_hits_total": [({}, 1e308), ({}, 1e308)]}, "summed over its labels"),
])
def test_counters_given_by_hand_are_checked_too(samples, says):
    with pytest.raises(MetricsError, match=says):
        metrics.counters(samples)


def test_a_position_the_server_left_out_counted_nothing():
    samples = {"vllm:spec_decode_num_accepted_tokens_per_pos_total": [({"position": "2"}, 3.0),
                                                                       ({"position": "0"}, 5.0)]}
    assert metrics.counters(samples)["accepted_per_position"] == [5, 0, 3]


# -- the watcher: each batch checked before the tree takes it -------------------------------------------------------

def frames(seq: int, events: list, signed: bool = False) -> list[bytes]:
    return [b"", seq.to_bytes(8, "big", signed=signed), msgpack.packb([time.time(), events, 0])]


def stored(h, parent, tokens, block_size=B, hashes=None) -> dict:
    return {"type": "BlockStored", "block_hashes": hashes if hashes is not None else [h], "parent_block_hash": parent,
            "token_ids": tokens, "block_size": block_size, "lora_id": None, "medium": None}


def unstarted() -> Watcher:
    """A watcher whose receive function is fed by hand: nothing is connected until start()."""
    return Watcher("http://127.0.0.1:1", "ipc:///nonexistent/kv")


@pytest.mark.parametrize("event, says", [
    (stored(1, None, ["a", "b", "c", "d"]), "token_ids must be list[int], got list"),
    (stored(1, None, [1.0, 2.0, 3.0, 4.0]), "token_ids must be list[int]"),
    (stored(1, None, [True, 2, 3, 4]), "token_ids must be list[int]"),
    (stored(1, None, [1, 2, -3, 4]), "token_ids must be >= 0"),
    (stored(1, None, [1, 2, 3]), "3 token ids are not 1 full blocks of 4"),
    (stored(1, None, [], block_size=0, hashes=[]), "block_size must be >= 1"),
    (stored(1, None, [1, 2, 3, 4], block_size=4.0), "block_size must be int"),
    (stored(1.5, None, [1, 2, 3, 4]), "block_hashes must be a list of block hashes"),
    (stored(1, "parent", [1, 2, 3, 4]), "parent_block_hash must be a block hash"),
    (stored(1, None, [1, 2, 3, 4], hashes=[[300, 1]]), "block_hashes must be"),
    ({"type": "BlockRemoved", "block_hashes": 7}, "block_hashes must be a list"),
    ({"type": ["BlockStored"]}, "not a BlockStored, BlockRemoved"),
    (["BlockStored", [1], None, ["x"] * 4, B], "token_ids must be list[int]"),  # the older array form
])
def test_an_event_a_trace_could_not_hold_is_refused(event, says):
    w = unstarted()
    with pytest.raises(EventStreamError, match=rf"batch 0 .*{re.escape(says)}") as caught:
        w._receive(frames(0, [event]))
    assert "ipc:///nonexistent/kv" in str(caught.value)
    assert len(w.log) == 0 and w.batches == 0


def test_what_the_watcher_takes_saves_a_trace_that_loads(tmp_path):
    w = unstarted()
    w._receive(frames(0, [stored(b"\x01" * 32, None, [1, 2, 3, 4]), stored(2, b"\x01" * 32, [5, 6, 7, 8])]))
    w._receive(frames(1, [["BlockStored", [[9] * 32], None, [9, 9, 9, 9], B], {"type": "BlockRemoved",
                                                                                "block_hashes": [2]}]))
    again = EventLog.load(w.log.save(tmp_path / "watched.jsonl"))
    assert again.events == w.log.events and [e.ids for e in again.of(Insert)] == [[1, 2, 3, 4], [5, 6, 7, 8],
                                                                                    [9, 9, 9, 9]]


def test_a_batch_number_far_ahead_is_refused_not_a_reason_to_drop_every_later_batch():
    w = unstarted()
    w._receive(frames(0, [stored(1, None, [1, 2, 3, 4])]))
    with pytest.raises(EventStreamError, match=r"batch 4611686018427387904 .*came after batch 0: a move of "
                                               r"\+4,611,686,018,427,387,904, more than the 1,000,000"):
        w._receive(frames(2 ** 62, [stored(2, 1, [5, 6, 7, 8])]))
    w._receive(frames(1, [stored(2, 1, [5, 6, 7, 8])]))  # the stream goes on as if the bad batch never came
    assert w.tree.sequences() == [[1, 2, 3, 4, 5, 6, 7, 8]] and w.missed == 0


def test_a_batch_number_far_behind_is_refused_and_a_negative_one_always():
    w = unstarted()
    w._receive(frames(5_000_000, []))
    with pytest.raises(EventStreamError, match="a move of -4,999,999"):
        w._receive(frames(1, []))
    with pytest.raises(EventStreamError, match="numbered -1: batch numbers count up from 0"):
        w._receive(frames(-1, [], signed=True))
    assert w.batches == 1


def test_a_gap_is_said_with_its_count_and_a_repeat_applied_once():
    w = unstarted()
    w._receive(frames(0, [stored(1, None, [1, 2, 3, 4])]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w._receive(frames(5, [stored(2, 1, [5, 6, 7, 8])]))
        w._receive(frames(3, [stored(3, 1, [9, 9, 9, 9])]))  # behind the last: seen already, or lost for good
    assert [str(c.message) for c in caught] == [
        "the KV events of http://127.0.0.1:1 skip from batch 0 to batch 5: 4 batches lost (4 in all), and the view "
        "lacks the blocks they stored or removed"]
    assert (w.missed, w.repeated, w.batches) == (4, 1, 2) and len(w.tree) == 2


def test_a_frame_over_the_bound_is_refused(monkeypatch):
    monkeypatch.setattr(watch, "MAX_FRAME", 1000)
    w = unstarted()
    with pytest.raises(EventStreamError, match=r"a frame of 1,\d{3} bytes, more than the 1,000 accepted"):
        w._receive(frames(0, [stored(1, None, list(range(1000, 1512)), block_size=512)]))


# -- the same through real sockets ---------------------------------------------------------------------------------

@pytest.fixture
def publisher(server, tmp_path):
    """A /metrics that counts nothing and a ZMQ publisher on a socket file: a server's two faces, made by hand."""
    url = server(reply("vllm:spec_decode_num_drafts_total 0.0\n"))
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    endpoint = f"ipc://{tmp_path}/kv"
    pub.bind(endpoint)
    yield url, endpoint, pub
    pub.close(0)
    ctx.term()


def wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert condition()


def slowly(seconds: float, body: str):
    """A script that answers whole, but only after `seconds` (a server busy serving, on the CPU it shares)."""
    def script(h):
        if not h.server.stop.wait(seconds):
            reply(body)(h)
    return script


def test_a_busy_server_is_waited_for_and_a_silent_one_given_up_on_after_the_patience(server, tmp_path):
    counts = "vllm:spec_decode_num_drafts_total 0.0\n"
    url = server(slowly(1.5, counts))
    with Watcher(url, f"ipc://{tmp_path}/kv", interval=0.1, patience=4) as w:
        time.sleep(2)
        w.settle(quiet=0.1)  # read the counters once more, slowly: no error
        assert w.error is None and w.counters is not None
    url = server(slowly(60, counts))
    w = Watcher(url, f"ipc://{tmp_path}/kv", interval=0.1, patience=1)
    with pytest.raises(ServerError, match="within the 1 s allowed"):
        w.start()


def test_a_watcher_on_a_socket_bounds_frames_and_stops_at_ids_that_are_not_ints(publisher, tmp_path):
    url, endpoint, pub = publisher
    with Watcher(url, endpoint, interval=0.1) as w:
        assert w._socket.getsockopt(zmq.MAXMSGSIZE) == watch.MAX_FRAME  # ZMQ drops a larger frame unread
        pub.send_multipart(frames(0, [stored(1, None, [1, 2, 3, 4])]))
        wait_for(lambda: len(w.tree) == 1)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            pub.send_multipart(frames(1, [stored(2, 1, ["5", "6", "7", "8"])]))
            wait_for(lambda: w.error is not None)
        assert isinstance(w.error, EventStreamError) and "token_ids must be list[int]" in str(w.error)
        with pytest.raises(EventStreamError):
            w.settle()
    again = EventLog.load(w.log.save(tmp_path / "kept.jsonl"))  # what it kept still loads
    assert [e.ids for e in again.of(Insert)] == [[1, 2, 3, 4]]
