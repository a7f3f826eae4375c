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

What goes wrong is said once, and the log keeps what it had: a server that does not answer when the watcher starts
raises a ServerError at once; one that dies later, or a message that is not a KV event batch, stops the watcher
with `watcher.error` set, a warning, and the same error raised by the next `settle()` or `check()`.
"""

from __future__ import annotations

import threading
import time
import warnings

from teachspec.events import Counters, EventLog
from teachspec.serving import metrics
from teachspec.serving.blocks import BlockTree
from teachspec.serving.launch import ServerError, VllmServer


class EventStreamError(ServerError):
    """A message on the KV-event socket that is not a KV event batch."""


def decode(frames: list[bytes]) -> tuple[int, list[tuple[str, dict]]]:
    """One ZMQ message from vLLM's publisher: (sequence number, [(event type, its fields), ...])."""
    import msgpack

    if len(frames) != 3 or len(frames[1]) != 8:
        raise EventStreamError(f"a message on the KV-event socket has {len(frames)} frames "
                               f"({[len(f) for f in frames]} bytes); vLLM sends 3: topic, an 8-byte sequence number, "
                               f"the msgpack batch")
    seq = int.from_bytes(frames[1], "big", signed=True)
    try:
        batch = msgpack.unpackb(frames[2], raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several kinds for bytes that are not msgpack
        raise EventStreamError(f"batch {seq} on the KV-event socket is not msgpack ({type(e).__name__}: {e})") \
            from None
    if not isinstance(batch, (list, tuple)) or len(batch) < 2 or not isinstance(batch[1], (list, tuple)):
        raise EventStreamError(f"batch {seq} on the KV-event socket is not a KVEventBatch [ts, events, ...]: "
                               f"{str(batch)[:80]}")
    return seq, [_event(e, seq) for e in batch[1]]


_FIELDS = {"BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size"),
           "BlockRemoved": ("block_hashes",), "AllBlocksCleared": ()}


def _event(e, seq: int) -> tuple[str, dict]:
    if isinstance(e, dict):
        kind, fields = e.get("type"), e
    elif isinstance(e, (list, tuple)) and e:
        kind = e[0]
        fields = dict(zip(_FIELDS.get(kind, ()), e[1:]))
    else:
        kind, fields = None, {}
    if kind not in _FIELDS or any(name not in fields for name in _FIELDS[kind]):
        raise EventStreamError(f"batch {seq} holds an event that is not a BlockStored, BlockRemoved or "
                               f"AllBlocksCleared with their fields: {str(e)[:80]}")
    return kind, {name: fields[name] for name in _FIELDS[kind]}


class Watcher:
    """Follows one vLLM server's KV events and counters into `log` (a new EventLog unless given)."""

    def __init__(self, server: VllmServer | str, events_endpoint: str | None = None, log: EventLog | None = None,
                 interval: float = 0.25, replay_endpoint: str | None = None):
        if isinstance(server, VllmServer):
            self.url, events_endpoint = server.url, events_endpoint or server.events_endpoint
            replay_endpoint = replay_endpoint or server.replay_endpoint
        elif isinstance(server, str):
            self.url = server.rstrip("/")
        else:
            raise TypeError(f"server must be a VllmServer (from start_vllm) or its URL, got {type(server).__name__}")
        if not isinstance(events_endpoint, str) or not events_endpoint.startswith(("tcp://", "ipc://")):
            raise ValueError(f"events_endpoint must be where the server publishes KV events, tcp://HOST:PORT or "
                             f"ipc://FILE (its --kv-events-config endpoint), got {events_endpoint!r}")
        self.endpoint, self.replay_endpoint, self.interval = events_endpoint, replay_endpoint, interval
        self.log = log if log is not None else EventLog(pair=getattr(server, "pair", None))
        self.tree = BlockTree(self.log)
        self.counters: Counters | None = None
        self.error: ServerError | None = None
        self.missed = 0                       # batches lost in a gap of sequence numbers
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
            raise ServerError(f"cannot watch {self.url}: {e}") from None
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.SUB)
        self._socket.setsockopt(zmq.SUBSCRIBE, b"")
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(self.endpoint)
        if self.replay_endpoint:
            self._replay = self._context.socket(zmq.DEALER)
            self._replay.setsockopt(zmq.LINGER, 0)
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
        seq, events = decode(frames)
        expected = 0 if self._last_seq is None else self._last_seq + 1
        if seq > expected and self._replay is not None:
            self._catch_up(expected)
        self._apply(seq, events)  # counts in `missed` what is still lost

    def _catch_up(self, start: int) -> None:
        """Ask the replay socket for batches start, start + 1, ... and apply them; it ends with number -1."""
        self._replay.send_multipart([b"", start.to_bytes(8, "big")])
        while True:
            if not self._replay.poll(10_000):
                raise ServerError(f"the vLLM server at {self.url} did not answer its replay socket "
                                  f"({self.replay_endpoint}) within 10 s")
            frames = self._replay.recv_multipart()[1:]  # after the empty delimiter: topic, sequence, payload
            if len(frames) == 3 and frames[1] == (-1).to_bytes(8, "big", signed=True):
                return
            self._apply(*decode(frames))

    def _apply(self, seq: int, events: list[tuple[str, dict]]) -> None:
        self._last_message = time.monotonic()
        if self._last_seq is not None and seq <= self._last_seq:
            return  # seen already: replayed, then arriving live (or the other way round)
        if self._last_seq is not None and seq > self._last_seq + 1:
            self.missed += seq - self._last_seq - 1
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
            raise ServerError(f"the vLLM server at {self.url} stopped answering while watched: {e}. The view keeps "
                              f"the {len(self.log)} events it had") from None

    def _read_counters(self) -> None:
        with self._reading:
            fields = metrics.counters(metrics.read(self.url, timeout=5.0))
            if self.counters is None or any(getattr(self.counters, k) != v for k, v in fields.items()):
                self.counters = self.log.emit(Counters, source=self.url, **fields)

    def _fail(self, error: ServerError) -> None:
        self.error = error
        warnings.warn(str(error), RuntimeWarning, stacklevel=2)
