"""Watching a vLLM server: its KV events and its counters, turned into teachspec's event log as they happen.

A vLLM server started with `--kv-events-config` publishes every change to its prefix cache on a ZMQ PUB socket
(vllm/distributed/kv_events.py). Each message has three frames:

    topic           bytes (empty unless configured)
    sequence        8 bytes, big-endian: the batch's number, so a subscriber can tell it missed one
    payload         msgpack of a KVEventBatch: [ts, events, data_parallel_rank], each event a map tagged by
                    "type" ("BlockStored", "BlockRemoved", "AllBlocksCleared"); older vLLMs sent each event as
                    an array [type, field, ...] in field order

`Watcher` subscribes to that socket and polls the server's `/metrics`, on a thread of its own, and writes what it
learns into an EventLog: the blocks through `BlockTree` (Insert and Evict events, one per block), the counters as a
Counters event whenever they change. So `RadixTreeView.live(watcher.log, ...)` draws vLLM's prefix cache while it
serves, `watcher.log.save(...)` keeps a trace that replays with no server, and the charts read the counters.

    with start_vllm("tiny", speculate="model") as server, Watcher(server) as watcher:
        ... send requests ...
        watcher.settle()                     # until the events of what was sent have arrived
        watcher.tree.sequences(), metrics.stats(watcher.counters)

No batch is lost silently. A PUB socket drops what it sends before a subscriber has joined, and drops more when a
subscriber falls behind; so vLLM also keeps its recent batches (`buffer_steps` of them) behind a replay socket that
answers "send me the batches from number n on". The watcher asks it for everything from batch 0 when it starts (so
it can also join a server that has been serving for a while) and again whenever the sequence numbers jump; a batch
seen twice is applied once. Without a replay endpoint, a jump is counted in `missed`.

ZMQ has no API key: a server started with one (`start_vllm(..., api_key=)`) guards its /v1 only, and the watcher
needs none, since `/metrics` is open and the event sockets are socket files that only their owner may connect to
(start_vllm makes them 0o700).

What goes wrong is said once, and the log keeps what it had: a server that does not answer when the watcher starts
raises a ServerError at once; one that dies later (a ServerGone), or a message that is not a KV event batch, stops
the watcher with `watcher.error` set, a warning, and the same error raised by the next `settle()` or `check()`.
Where a dying server is news rather than a failure (a replica of a cluster, cluster_watch.py), `on_gone` is called
with the ServerGone instead, and the watcher stops quietly, its error kept in `gone`. A server that
is only busy is not dead: on a CPU shared with the engine it serves, a /metrics reply can take seconds, so each
read is given `patience` seconds (30 by default) before the server is said to have stopped answering. Nothing
listening, or a reply that is not Prometheus text, is said at once.

Nothing on the socket is taken without looking, since whatever the watcher takes ends up in a trace that must load:

    size        a frame longer than `MAX_FRAME` bytes is refused (ZMQ drops a larger message, and the gap it leaves
                in the numbers is counted and said like any other)
    fields      each event's fields have the types a trace has (events.py checks both the same way): token ids are
                whole numbers >= 0, a block size is >= 1, a stored run holds exactly its blocks' tokens
    numbers     batch numbers are >= 0 and move by at most `MAX_JUMP` from the last one (vLLM keeps 10,000 batches
                for replay by default): a number corrupted into 2^62 would otherwise make every later batch look
                seen already, and be dropped without a word

A gap in the numbers is said by a warning with the count of batches lost, and counted in `missed`; a batch seen
twice (replayed, then live) is applied once and counted in `repeated`.

Several watchers may share one log (`log=`), one per replica of a cluster: `replica=i` stamps i on every event this
watcher writes (its blocks through `ReplicaLog`, its Counters), so the views tell the replicas' trees apart. The
watchers of one log write one event at a time, each with its subscribers' calls: a live view sees the events in
the order the log holds them, whichever thread wrote them.
"""

from __future__ import annotations

import threading
import time
import warnings
import weakref
from typing import Any, Callable

# the trace loader's own type check, so that an event taken here is one a saved trace can load
from teachspec.events import Counters, Event, EventLog, ReplicaLog, _conforms, _type_name
from teachspec.serving import metrics
from teachspec.serving.blocks import BlockTree
from teachspec.serving.launch import ServerError, VllmServer

MAX_FRAME = 64 * 1024 * 1024  # bytes in one frame: a batch of a step's new blocks is far smaller
MAX_JUMP = 1_000_000          # how far batch numbers may move from the last one seen (see the module docstring)
SOCKET = "the KV-event socket"


class EventStreamError(ServerError):
    """A message on the KV-event socket that is not a KV event batch."""


class ServerGone(ServerError):
    """The server stopped answering while it was watched: it died, or was killed."""


_WRITING: "weakref.WeakKeyDictionary[EventLog, threading.Lock]" = weakref.WeakKeyDictionary()
_WRITING_LOCK = threading.Lock()


class LogWriter:
    """Where a watcher writes: `log`, one event at a time with every other watcher of the same log, each event
    stamped with `replica` when one is given. It has the one method a BlockTree calls, `emit`."""

    def __init__(self, log: EventLog, replica: int | None = None):
        with _WRITING_LOCK:
            self.lock = _WRITING.setdefault(log, threading.Lock())
        self.log, self.replica = log, replica
        self._to = log if replica is None else ReplicaLog(log, replica)

    def emit(self, cls: type[Event], request: int = -1, **fields) -> Event:
        with self.lock:  # the append and the subscribers' calls together: no other watcher's event in between
            return self._to.emit(cls, request, **fields)


def unpack_batch(frames: list[bytes], source: str = SOCKET) -> tuple[int, list[tuple[str, dict]]]:
    """One ZMQ message from vLLM's publisher: (sequence number, [(event type, its fields), ...]), every field
    checked; an EventStreamError says what `source` sent that is not a KV event batch, quoting its start."""
    import msgpack

    if len(frames) != 3 or len(frames[1]) != 8:
        raise EventStreamError(f"a message on {source} has {len(frames)} frames "
                               f"({[len(f) for f in frames]} bytes); vLLM sends 3: topic, an 8-byte sequence number, "
                               f"the msgpack batch")
    seq = int.from_bytes(frames[1], "big", signed=True)
    if seq < 0:
        raise EventStreamError(f"a message on {source} is numbered {seq}: batch numbers count up from 0")
    big = max(frames, key=len)
    if len(big) > MAX_FRAME:
        raise EventStreamError(f"batch {seq} on {source} has a frame of {len(big):,} bytes, more than the "
                               f"{MAX_FRAME:,} accepted")
    try:
        batch = msgpack.unpackb(frames[2], raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several kinds for bytes that are not msgpack
        raise EventStreamError(f"batch {seq} on {source} is not msgpack ({type(e).__name__}: {e}): "
                               f"{frames[2][:80]!r}") from None
    if not isinstance(batch, (list, tuple)) or len(batch) < 2 or not isinstance(batch[1], (list, tuple)):
        raise EventStreamError(f"batch {seq} on {source} is not a KVEventBatch [ts, events, ...]: "
                               f"{str(batch)[:200]}")
    return seq, [_event(e, seq, source) for e in batch[1]]


Hash = Any  # vLLM names a block by an int or by bytes (a sha256 digest), as its hash function gives it
_FIELDS: dict[str, dict[str, Any]] = {
    "BlockStored": {"block_hashes": list[Hash], "parent_block_hash": Hash | None, "token_ids": list[int],
                    "block_size": int},
    "BlockRemoved": {"block_hashes": list[Hash]},
    "AllBlocksCleared": {}}


def _event(e, seq: int, source: str = SOCKET) -> tuple[str, dict]:
    if isinstance(e, dict):
        kind, fields = e.get("type"), e
    elif isinstance(e, (list, tuple)) and e:
        kind = e[0]
        fields = dict(zip(_FIELDS.get(kind, ()), e[1:])) if isinstance(kind, str) else {}
    else:
        kind, fields = None, {}
    if not isinstance(kind, str) or kind not in _FIELDS or any(name not in fields for name in _FIELDS[kind]):
        raise EventStreamError(f"batch {seq} on {source} holds an event that is not a BlockStored, BlockRemoved or "
                               f"AllBlocksCleared with their fields: {str(e)[:200]}")
    fields = {name: fields[name] for name in _FIELDS[kind]}
    problem = _problem(kind, fields)
    if problem:
        raise EventStreamError(f"batch {seq} on {source} holds a {kind} whose {problem}: {str(e)[:200]}")
    return kind, fields


def _problem(kind: str, fields: dict) -> str | None:
    """What is wrong with an event's fields, or None: their types as a trace checks them, then their meaning."""
    for name, hint in _FIELDS[kind].items():
        value = fields[name]
        if name in ("block_hashes", "parent_block_hash"):
            hashes = value if name == "block_hashes" else [] if value is None else [value]
            if not isinstance(hashes, list) or not all(map(_is_hash, hashes)):
                return f"{name} must be {'a list of block hashes' if name == 'block_hashes' else 'a block hash'} " \
                       f"(ints, or bytes), got {str(value)[:80]}"
        elif not _conforms(value, hint):
            return f"{name} must be {_type_name(hint)}, got {type(value).__name__} {str(value)[:80]}"
    if kind != "BlockStored":
        return None
    if fields["block_size"] < 1:
        return f"block_size must be >= 1, got {fields['block_size']}"
    if any(t < 0 for t in fields["token_ids"]):
        return f"token_ids must be >= 0 (a token id indexes the vocabulary), got {min(fields['token_ids'])}"
    if len(fields["token_ids"]) != len(fields["block_hashes"]) * fields["block_size"]:
        return (f"{len(fields['token_ids'])} token ids are not {len(fields['block_hashes'])} full blocks of "
                f"{fields['block_size']}")
    return None


def _is_hash(h: Any) -> bool:
    """An int, bytes, or a list of byte values (msgpack's form of bytes from some encoders); never true or false."""
    if isinstance(h, list):
        return all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in h)
    return isinstance(h, (int, bytes, bytearray)) and not isinstance(h, bool)


class Watcher:
    """Follows one vLLM server's KV events and counters into `log` (a new EventLog unless given); `replica` stamps
    its events for a log several servers share, `on_gone` hears the server die (see the module docstring)."""

    def __init__(self, server: VllmServer | str, events_endpoint: str | None = None, log: EventLog | None = None,
                 interval: float = 0.25, replay_endpoint: str | None = None, patience: float = 30.0,
                 replica: int | None = None, on_gone: Callable[[ServerGone], None] | None = None):
        if isinstance(server, VllmServer):
            self.url, events_endpoint = server.url, events_endpoint or server.events_endpoint
            replay_endpoint = replay_endpoint or server.replay_endpoint
        elif isinstance(server, str):
            self.url = server.rstrip("/")
        else:
            raise TypeError(f"server must be a VllmServer (from start_vllm) or its URL, got {type(server).__name__}")
        for name, value, means in (("interval", interval, "between two reads of /metrics"),
                                   ("patience", patience, "a /metrics reply may take")):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < 3600:
                raise ValueError(f"{name} must be the seconds {means}, a number in (0, 3600), got {value!r}")
        if not isinstance(events_endpoint, str) or not events_endpoint.startswith(("tcp://", "ipc://")):
            raise ValueError(f"events_endpoint must be where the server publishes KV events, tcp://HOST:PORT or "
                             f"ipc://FILE (its --kv-events-config endpoint), got {events_endpoint!r}")
        if replica is not None and (isinstance(replica, bool) or not isinstance(replica, int) or replica < 0):
            raise ValueError(f"replica must be the server's index in its cluster, an int >= 0, or None for a server "
                             f"watched alone, got {replica!r}")
        if on_gone is not None and not callable(on_gone):
            raise TypeError(f"on_gone must be a function taking the ServerGone error, got {type(on_gone).__name__}")
        self.endpoint, self.replay_endpoint, self.interval = events_endpoint, replay_endpoint, interval
        self.patience = float(patience)
        self.log = log if log is not None else EventLog(pair=getattr(server, "pair", None))
        self.replica, self.on_gone = replica, on_gone
        self.writer = LogWriter(self.log, replica)
        self.tree = BlockTree(self.writer)
        self.counters: Counters | None = None
        self.error: ServerError | None = None
        self.gone: ServerGone | None = None   # the server died while watched, and `on_gone` was told
        self.missed = 0                       # batches lost in a gap of sequence numbers
        self.repeated = 0                     # batches seen twice (replayed, then live), applied once
        self.batches = 0
        self._last_seq: int | None = None
        self._last_message = time.monotonic()
        self._stop = threading.Event()
        self._reading = threading.Lock()      # settle() reads the counters too, from the caller's thread
        self._thread: threading.Thread | None = None
        self._socket = self._replay = self._context = None

    # -- starting and stopping ------------------------------------------------------------------------------------

    def start(self) -> "Watcher":
        """Subscribe and start following; a server that does not answer now raises a ServerError, nothing started."""
        import zmq

        try:
            self._read_counters()
        except metrics.MetricsError as e:
            raise ServerError(f"cannot watch {self.url}: {e}") from None  # never started: not "gone"
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.SUB)
        self._socket.setsockopt(zmq.SUBSCRIBE, b"")
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME)  # ZMQ refuses a larger frame before it is in memory
        self._socket.connect(self.endpoint)
        if self.replay_endpoint:
            self._replay = self._context.socket(zmq.DEALER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME)
            self._replay.connect(self.replay_endpoint)
        else:
            time.sleep(0.3)  # ZMQ's slow joiner: a subscription takes a moment to reach the publisher
        self._thread = threading.Thread(target=self._follow, name="teachspec-vllm-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._context is not None:
            self._socket.close(0)
            if self._replay is not None:
                self._replay.close(0)
            self._context.term()
            self._context = None

    def __enter__(self) -> "Watcher":
        return self.start() if self._thread is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- reading what it has -------------------------------------------------------------------------------------

    def check(self) -> None:
        """Raise the error that stopped the watcher, if one did."""
        if self.error is not None:
            raise self.error

    def settle(self, quiet: float = 0.3, timeout: float = 15.0) -> "Watcher":
        """Wait until no KV event has come for `quiet` seconds since this call (vLLM publishes a step's events
        from a thread of its own, just after the step, so the events of a request that has just returned may still
        be on their way), then read the counters once more; raise what stopped the watcher, if anything did."""
        called = time.monotonic()
        deadline = called + timeout
        while time.monotonic() < deadline and time.monotonic() - max(called, self._last_message) < quiet:
            self.check()
            time.sleep(0.05)
        self.check()
        if self._thread is not None and self._thread.is_alive():
            self._poll_counters()
        self.check()
        return self

    # -- the thread ----------------------------------------------------------------------------------------------

    def _follow(self) -> None:
        import zmq

        next_poll = 0.0
        try:
            if self._replay is not None:
                self._catch_up(0)
            while not self._stop.is_set():
                if self._socket.poll(int(self.interval * 1000)):
                    self._receive(self._socket.recv_multipart(zmq.NOBLOCK))
                if time.monotonic() >= next_poll:
                    self._poll_counters()
                    next_poll = time.monotonic() + self.interval
        except ServerError as e:
            self._fail(e)
        except Exception as e:  # anything else is a bug here; still said once, the log kept
            self._fail(ServerError(f"the watcher of {self.url} stopped: {type(e).__name__}: {e}"))

    def _receive(self, frames: list[bytes]) -> None:
        """A batch from the live socket: after a jump in the numbers, first the batches in between."""
        seq, events = unpack_batch(frames, f"{SOCKET} {self.endpoint}")
        self._check_number(seq)
        expected = 0 if self._last_seq is None else self._last_seq + 1
        if seq > expected and self._replay is not None:
            self._catch_up(expected)
        self._apply(seq, events)  # counts in `missed` what is still lost

    def _catch_up(self, start: int) -> None:
        """Ask the replay socket for batches start, start + 1, ... and apply them; it ends with number -1."""
        self._replay.send_multipart([b"", start.to_bytes(8, "big")])
        for _ in range(MAX_JUMP + 1):  # a replay socket that never says it is done is a broken one
            if not self._replay.poll(10_000):
                raise ServerGone(f"the vLLM server at {self.url} did not answer its replay socket "
                                 f"({self.replay_endpoint}) within 10 s")
            frames = self._replay.recv_multipart()[1:]  # after the empty delimiter: topic, sequence, payload
            if len(frames) == 3 and frames[1] == (-1).to_bytes(8, "big", signed=True):
                return
            self._apply(*unpack_batch(frames, f"the replay socket {self.replay_endpoint}"))
        raise EventStreamError(f"the replay socket {self.replay_endpoint} sent more than {MAX_JUMP:,} batches for "
                               f"one request without its end mark (-1)")

    def _check_number(self, seq: int) -> None:
        """Refuse a batch number that moved further than any stream moves (see the module docstring)."""
        if self._last_seq is not None and abs(seq - self._last_seq) > MAX_JUMP:
            raise EventStreamError(f"batch {seq} on {SOCKET} {self.endpoint} came after batch {self._last_seq}: "
                                   f"a move of {seq - self._last_seq:+,}, more than the {MAX_JUMP:,} a stream can "
                                   f"make, so its numbers are corrupted (or the server restarted: watch it anew)")

    def _apply(self, seq: int, events: list[tuple[str, dict]]) -> None:
        self._check_number(seq)
        self._last_message = time.monotonic()
        if self._last_seq is not None and seq <= self._last_seq:
            self.repeated += 1  # seen already: replayed, then arriving live (or the other way round)
            return
        if self._last_seq is not None and seq > self._last_seq + 1:
            lost = seq - self._last_seq - 1
            self.missed += lost
            warnings.warn(f"the KV events of {self.url} skip from batch {self._last_seq} to batch {seq}: {lost:,} "
                          f"batches lost ({self.missed:,} in all), and the view lacks the blocks they stored or "
                          f"removed", RuntimeWarning, stacklevel=2)
        self._last_seq = seq
        self.batches += 1
        for kind, fields in events:
            if kind == "BlockStored":
                self.tree.stored(fields["block_hashes"], fields["parent_block_hash"], fields["token_ids"],
                                 fields["block_size"])
            elif kind == "BlockRemoved":
                self.tree.removed(fields["block_hashes"])
            else:
                self.tree.cleared()

    def _poll_counters(self) -> None:
        try:
            self._read_counters()
        except metrics.MetricsError as e:
            raise ServerGone(f"the vLLM server at {self.url} stopped answering while watched: {e}. The view keeps "
                             f"the {len(self.log)} events it had") from None

    def _read_counters(self) -> None:
        with self._reading:
            fields = metrics.counters(metrics.read(self.url, timeout=self.patience))
            if self.counters is None or any(getattr(self.counters, k) != v for k, v in fields.items()):
                self.counters = self.writer.emit(Counters, source=self.url, **fields)

    def _fail(self, error: ServerError) -> None:
        if isinstance(error, ServerGone) and self.on_gone is not None:
            self.gone = error  # news for whoever watches a cluster, not a failure of this watcher
            self.on_gone(error)
            return
        self.error = error
        warnings.warn(str(error), RuntimeWarning, stacklevel=2)
