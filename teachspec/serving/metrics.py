"""A vLLM server's counters, read from its Prometheus `/metrics`, as the numbers teachspec already uses.

vLLM counts speculation per step, not per token (vllm/v1/spec_decode/metrics.py):

    vllm:spec_decode_num_drafts                 speculation steps
    vllm:spec_decode_num_draft_tokens           guesses proposed
    vllm:spec_decode_num_accepted_tokens        guesses accepted
    vllm:spec_decode_num_accepted_tokens_per_pos{position="i"}   steps whose guess i was accepted

(on `/metrics` each with a `_total` suffix) and its prefix cache by prompt tokens looked up and found
(`vllm:prefix_cache_queries`, `vllm:prefix_cache_hits`). From these the course's numbers follow exactly, with no
per-token events: a guess i is judged only when guesses 0 .. i-1 were accepted, so

    judged  = drafts + accepted_per_pos[0] + ... + accepted_per_pos[k-2]
    alpha   = accepted / judged                                 (Stats.alpha's accepted / judged guesses)
    tokens per target pass = 1 + accepted / drafts              (vLLM's "mean acceptance length")

The last is Stats' tokens per target pass (tokens generated / target passes) over the passes vLLM counts, which
are its speculation steps: its prefill pass, which guesses nothing, is not among them.

vLLM's own dashboards show accepted / draft tokens as "acceptance rate", which also counts the guesses after a
rejection that were never judged, and so is lower than alpha. `stats(counters)` fills a `teachspec.stats.Stats`
with these steps (`Stats.from_counters`), so `theory` and the charts read a server as they read the engine.
"""

from __future__ import annotations

import math
import re

from teachspec.events import Counters
from teachspec.serving.http import fetch, quote
from teachspec.stats import Stats

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
Samples = dict[str, list[tuple[dict[str, str], float]]]
LIMIT = 16 * 1024 * 1024    # bytes of /metrics read at most: vLLM's, histograms and all, are a few hundred KB
MAX_POSITIONS = 1024        # speculated positions a server may count: far beyond any k a server runs


class MetricsError(RuntimeError):
    """A server whose /metrics could not be read, did not read as Prometheus text, or counted something that is
    not a count (NaN, infinite, below 0)."""


def parse(text: str) -> Samples:
    """Prometheus' text format: {metric name: [(labels, value), ...]}; comment lines are skipped."""
    out: Samples = {}
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise MetricsError(f"line {n} of /metrics is not Prometheus text: {line[:80]!r}")
        try:
            value = float(m.group(4))
        except ValueError:
            raise MetricsError(f"line {n} of /metrics has a value that is not a number: {line[:80]!r}") from None
        if m.group(1).endswith("_total"):  # Prometheus names its counters so, and a counter counts up from 0
            _count(value, f"line {n} of /metrics: {line[:80]!r}")
        out.setdefault(m.group(1), []).append((dict(_LABEL.findall(m.group(3) or "")), value))
    return out


def _count(value: float, where: str) -> float:
    """A counter's value, or a MetricsError: a count is a finite number >= 0 (Prometheus writes NaN and +Inf
    for gauges, and a counter that reads so, or below 0, is a server or a proxy gone wrong)."""
    if not math.isfinite(value) or value < 0:
        raise MetricsError(f"{where}: a counter must be a finite number >= 0, got {value}")
    return value


def read(url: str, timeout: float = 5.0) -> Samples:
    """GET url/metrics and parse it, all within `timeout` seconds; a MetricsError names the URL and says what went
    wrong (nothing listening, no whole answer in time, an answer that is not Prometheus text, quoting its start)."""
    where = url.rstrip("/") + "/metrics"
    reply = fetch(where, timeout=timeout, limit=LIMIT, error=MetricsError,
                  hint=": is the vLLM server running there? (teachspec serve starts one)")
    if reply.status != 200:
        raise MetricsError(f"{where} answered HTTP {reply.status}: is this a vLLM server? It sent {quote(reply.body)}")
    try:
        text = reply.body.decode("utf-8")
    except UnicodeDecodeError:
        raise MetricsError(f"{where} sent bytes that are not text: is this a vLLM server? It sent "
                           f"{quote(reply.body)}") from None
    try:
        return parse(text)
    except MetricsError as e:
        raise MetricsError(f"{where}: {e}; it sent {quote(reply.body)}") from None


def _total(samples: Samples, name: str) -> float:
    """A counter summed over its labels (vLLM counts per engine and per finish reason), each checked as a count."""
    values = [_count(v, name) for _, v in samples.get(name + "_total", samples.get(name, []))]
    return _count(sum(values), f"{name} summed over its labels")  # a sum of huge counts can overflow to inf


def counters(samples: Samples) -> dict:
    """The fields of a Counters event (everything but t, request and source) from a parsed /metrics."""
    per_position: dict[int, float] = {}
    name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    for labels, v in samples.get(name, []):
        position = labels.get("position", "0")
        if not position.isdecimal() or int(position) >= MAX_POSITIONS:
            raise MetricsError(f"{name} has a position that is not a whole number from 0 to {MAX_POSITIONS - 1}: "
                               f"position={position!r}")
        i = int(position)
        per_position[i] = per_position.get(i, 0.0) + _count(v, f"{name}{{position={position!r}}}")
    positions = range(max(per_position, default=-1) + 1)  # a position the server did not list counted nothing
    return dict(drafts=int(_total(samples, "vllm:spec_decode_num_drafts")),
                draft_tokens=int(_total(samples, "vllm:spec_decode_num_draft_tokens")),
                accepted=int(_total(samples, "vllm:spec_decode_num_accepted_tokens")),
                accepted_per_position=[int(per_position.get(i, 0)) for i in positions],
                prefix_queries=int(_total(samples, "vllm:prefix_cache_queries")),
                prefix_hits=int(_total(samples, "vllm:prefix_cache_hits")),
                requests=int(_total(samples, "vllm:request_success")))


def difference(after: Counters | dict, before: Counters | dict) -> dict:
    """after - before, field by field: what the server counted between two readings."""
    a, b = _fields(after), _fields(before)
    out = {name: a[name] - b[name] for name in a if name != "accepted_per_position"}
    ap, bp = a["accepted_per_position"], b["accepted_per_position"]
    out["accepted_per_position"] = [x - (bp[i] if i < len(bp) else 0) for i, x in enumerate(ap)]
    return out


def stats(c: Counters | dict) -> Stats:
    """The speculation steps a server counted, as a Stats: alpha, acceptance per position, tokens per target pass
    (Stats.from_counters says how each follows from the counters)."""
    c = _fields(c)
    return Stats.from_counters(c["drafts"], c["accepted"], c["accepted_per_position"], c["draft_tokens"])


def _fields(c: Counters | dict) -> dict:
    if isinstance(c, Counters):
        return {name: getattr(c, name) for name in ("drafts", "draft_tokens", "accepted", "accepted_per_position",
                                                    "prefix_queries", "prefix_hits", "requests")}
    return c
