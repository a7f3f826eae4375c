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


# -- histograms -------------------------------------------------------------------------------------------------
# vLLM also keeps histograms: `vllm:time_to_first_token_seconds` counts each request's time to its first token in
# cumulative buckets, `NAME_bucket{le="0.1"} 7` (7 requests took at most 0.1 s), the last `le="+Inf"` (all of them).
# A client that does not stream cannot see its time to first token; the server still counts it there.

TTFT = "vllm:time_to_first_token_seconds"
Buckets = list[tuple[float, float]]   # [(upper bound, observations at most that), ...], ascending, +Inf last


def histogram(samples: Samples, name: str) -> Buckets:
    """A histogram's cumulative buckets, summed over its other labels (vLLM's engine, model)."""
    counts: dict[float, float] = {}
    for labels, value in samples.get(name + "_bucket", []):
        le = labels.get("le", "")
        try:
            bound = float(le)
        except ValueError:
            raise MetricsError(f"{name}_bucket has a bucket whose upper bound is not a number: le={le!r}") from None
        counts[bound] = counts.get(bound, 0.0) + _count(value, f"{name}_bucket{{le={le!r}}}")
    buckets = sorted(counts.items())
    if buckets and (buckets[-1][0] != math.inf or any(b[1] > a[1] for a, b in zip(buckets[1:], buckets))):
        raise MetricsError(f"{name}_bucket is not a histogram: its counts must grow with le and end at le=\"+Inf\", "
                           f"got {buckets[:4]}...")
    return buckets


def histogram_difference(after: Buckets, before: Buckets) -> Buckets:
    """after - before, bucket by bucket: what was observed between two readings (the buckets are the same)."""
    was = dict(before)
    return [(bound, count - was.get(bound, 0.0)) for bound, count in after]


def quantile(buckets: Buckets, q: float) -> float:
    """The q-quantile (0 <= q <= 1) of what a histogram observed, as Prometheus' histogram_quantile estimates it: the
    bucket the rank q * total falls in, its observations taken as spread evenly between its bounds (the first
    bucket's lower bound 0); a rank in the +Inf bucket is given the highest finite bound."""
    if not 0 <= q <= 1:
        raise ValueError(f"q must be in [0, 1], got {q!r}")
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        raise ValueError("quantile of an empty histogram: no request was counted")
    rank, low, below = q * total, 0.0, 0.0
    for bound, count in buckets:
        if count >= rank and count > below:
            if bound == math.inf:
                return low
            return low + (bound - low) * (rank - below) / (count - below)
        low, below = bound, count
    return low


def _fields(c: Counters | dict) -> dict:
    if isinstance(c, Counters):
        return {name: getattr(c, name) for name in ("drafts", "draft_tokens", "accepted", "accepted_per_position",
                                                    "prefix_queries", "prefix_hits", "requests")}
    return c
