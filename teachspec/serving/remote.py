"""An OpenAI-compatible server as an engine: what `teachspec.program` needs, over HTTP.

A program calls three things on its engine: `generate` (for gen), `score` (for select) and `events` (where its
ProgramStep and ProgramSpan go). `RemoteEngine` does the first two with `/v1/completions` requests, sending token
ids, not text, so the server sees exactly the ids the local engine would:

    gen      {"prompt": ids, "max_tokens", "temperature", "top_k", "top_p", "seed", "stop",
              "include_stop_str_in_output": true, "return_token_ids": true}
             the generated ids come back as they were sampled, with the token that completed a stop string, as the
             local engine keeps them; the program cuts the text at the stop as it does locally (program/state.py)
    select   {"prompt": ids + choice ids, "max_tokens": 1, "prompt_logprobs": 0}
             the server's log p of every prompt token; a choice's are those of its own tokens, as Engine.score
             gives them (program/score.py), and select ranks them the same way for both engines: their sum, or
             their mean with choices_method="token_length_normalized" (program/calls.py, CHOICES_METHODS)

Each request is recorded in `events` as the engine records one (RequestStart, Prefill, Finish), with the prompt
tokens the server served from its prefix cache (`usage.prompt_tokens_details.cached_tokens`, given by a server
started with `--enable-prompt-tokens-details`, as `start_vllm` does). Give it a Watcher's log and the programs'
steps appear above vLLM's block tree in a RadixTreeView.

The server decides how it decodes: its speculative method and k are set when it starts (`start_vllm(...,
speculate=)`), so `speculate` and `k` of a program run are not sent. Greedy decoding gives the same tokens either
way; that is the point of speculative decoding.

A server started with an API key (`start_vllm(..., api_key=)`, `teachspec serve --api-key`) answers /v1 only to
requests that carry it as `Authorization: Bearer KEY`: give it as `api_key=`, or pass the VllmServer, which keeps
it (a URL alone takes TEACHSPEC_API_KEY). A 401 is said as a refused (or missing) key, not as a bare HTTP status.

A reply is taken only when it is what was asked for. Each request ends within `timeout` seconds, body and all
(serving/http.py), and a reply of the wrong shape is a ServerError that names the server and quotes what it sent:
no choice, no token ids, a continuation left unscored, a log probability missing or NaN, a cached token count
below 0 or above the prompt's length. Without these checks a broken server would surface as an IndexError deep in
a program, or worse, as an empty generation or a select with nothing to choose from.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

from teachspec.decode import Generation
from teachspec.events import EventLog, Finish, Prefill, RequestStart
from teachspec.program.score import Scored
from teachspec.serving.http import fetch, json_of, quote
from teachspec.serving.launch import ServerError, VllmServer
from teachspec.stats import Stats

COMPLETION_LIMIT = 64 * 1024 * 1024   # bytes of one /v1/completions reply: prompt log probabilities of ~500k tokens
MODELS_LIMIT = 1024 * 1024            # bytes of /v1/models: a list of names


class ServerReply(dict):
    """A server's JSON object, with where it came from and the bytes it was read from: what an error quotes."""

    __slots__ = ("where", "sent")

    def __init__(self, data: dict, where: str, sent: bytes):
        super().__init__(data)
        self.where, self.sent = where, sent


class RemoteEngine:
    """`generate` and `score` on an OpenAI-compatible server; `pair` gives the tokenizer both sides share."""

    def __init__(self, server: VllmServer | str, pair, events: EventLog | None = None, model: str | None = None,
                 timeout: float = 300.0, api_key: str | None = None):
        if isinstance(server, VllmServer):
            self.url, model = server.url, model or server.model
            api_key = api_key if api_key is not None else server.api_key
        elif isinstance(server, str) and server.startswith(("http://", "https://")):
            self.url = server.rstrip("/")
        else:
            raise TypeError(f"server must be a VllmServer (from start_vllm) or its http:// URL, got {server!r}")
        if not all(hasattr(pair, name) for name in ("encode", "decode", "eos", "tokenizer")):
            raise TypeError(f"pair must be a teachspec Pair (load_pair(...)), whose tokenizer the server shares, got "
                            f"{type(pair).__name__}")
        if api_key is None and not isinstance(server, VllmServer):  # a URL: the key `teachspec serve` was given
            api_key = os.environ.get("TEACHSPEC_API_KEY") or None
        if api_key is not None and (not isinstance(api_key, str) or not api_key or not api_key.isprintable()):
            raise ValueError("api_key must be a non-empty string of printable characters (it goes in an HTTP "
                             "header), or None for a server started without one")
        self.pair, self.timeout, self.api_key = pair, timeout, api_key
        self.events = events if events is not None else EventLog(pair=getattr(pair, "name", None))
        self.model = model or self._served_model()
        self._ids = 0

    def __repr__(self) -> str:
        return f"RemoteEngine({self.url!r}, model={self.model!r})"

    # -- what a program calls ------------------------------------------------------------------------------------

    def generate(self, prompt: list[int], max_new_tokens: int = 64, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None, speculate=None, k=None,
                 seed: int | None = None, stop: list[str] | None = None, ignore_eos: bool = False) -> Generation:
        """Continue token ids on the server; `speculate` and `k` are the server's own (see the module docstring)."""
        ids = self._ids_of(prompt)
        body = {"prompt": ids, "max_tokens": max_new_tokens, "temperature": temperature,
                "return_token_ids": True, "include_stop_str_in_output": True, "ignore_eos": ignore_eos,
                "skip_special_tokens": False}
        if top_k is not None:
            body["top_k"] = top_k
        if top_p is not None:
            body["top_p"] = top_p
        if seed is not None:
            body["seed"] = seed
        if stop:
            body["stop"] = list(stop)
        request, t0 = self._start(ids), time.perf_counter()
        out = self.complete(body)
        choice = self._choices(out)[0]
        tokens = choice.get("token_ids")
        if not _whole_numbers(tokens):  # absent is not "generated nothing": the server did not say what it generated
            raise self._bad(out, f"gave no token_ids (a list of token ids >= 0) in its choice, got {_short(tokens)}; "
                                 f"teachspec asks for them with return_token_ids, which vLLM serves")
        stats = self._stats(out, len(ids), time.perf_counter() - t0, len(tokens))
        # vLLM's finish_reason is "stop" for an eos id and a stop string alike; stop_reason tells them apart
        reason = ("length" if choice.get("finish_reason") == "length" else
                  "stop" if isinstance(choice.get("stop_reason"), str) else "eos")
        self._finish(request, stats, reason)
        return Generation(self.pair.decode(tokens), tokens, ids, reason, stats)

    def score(self, prompt: list[int], continuations: list) -> list[Scored]:
        """log p(continuation | prompt) for each, from the server's prompt log probabilities.

        All continuations go in one request (a list of prompts), which the server runs as one batch. vLLM does
        not serve a request that asks for prompt log probabilities from its prefix cache: it must compute every
        prompt position to report it, so a select on a server computes its whole prompt, once per choice."""
        ids = self._ids_of(prompt)
        tails = [self.pair.encode(t, special=False) if isinstance(t, str) else [int(x) for x in t]
                 for t in continuations]
        if not tails or not all(tails):
            raise ValueError(f"continuations must be a non-empty list of non-empty texts or id lists, got "
                             f"{continuations!r}")
        requests, t0 = [self._start(ids + tail) for tail in tails], time.perf_counter()
        out = self.complete({"prompt": [ids + tail for tail in tails], "max_tokens": 1, "temperature": 0.0,
                             "prompt_logprobs": 0})
        seconds = time.perf_counter() - t0
        choices = self._choices(out)
        indexes = [c.get("index") for c in choices]
        # one choice per continuation, numbered as asked: a continuation left out would leave select less to choose
        if not _whole_numbers(indexes) or sorted(indexes) != list(range(len(tails))):
            raise self._bad(out, f"scored the continuations {_short(indexes)}; {len(tails)} were asked, so each "
                                 f"index from 0 to {len(tails) - 1} once")
        scored = []
        for choice in sorted(choices, key=lambda c: c["index"]):
            tail = tails[choice["index"]]
            rows = choice.get("prompt_logprobs")
            if not isinstance(rows, list) or len(rows) != len(ids) + len(tail):
                raise self._bad(out, f"gave no prompt_logprobs for the {len(ids) + len(tail)} prompt tokens of "
                                     f"choice {choice['index']}: is it a vLLM server? (select needs the log "
                                     f"probability of each prompt token)")
            logprobs = [self._logprob(out, rows[len(ids) + i], t, len(ids) + i) for i, t in enumerate(tail)]
            stats = Stats(prompt_tokens=len(ids) + len(tail) - 1, wall_s=seconds / len(tails))
            self._finish(requests[choice["index"]], stats, "score")
            scored.append(Scored(tail, logprobs, stats))
        return scored

    # -- HTTP ----------------------------------------------------------------------------------------------------

    def complete(self, body: dict) -> dict:
        """POST /v1/completions; a ServerError names the server and quotes its complaint."""
        return self._call("/v1/completions", {"model": self.model, **body}, COMPLETION_LIMIT)

    def _served_model(self) -> str:
        out = self._call("/v1/models", None, MODELS_LIMIT)
        models = out.get("data")
        if not isinstance(models, list) or not models:
            raise self._bad(out, "lists no model (its \"data\" must be a non-empty list)")
        name = models[0].get("id") if isinstance(models[0], dict) else None
        if not isinstance(name, str) or not name:
            raise self._bad(out, "lists a model without a name (each entry of \"data\" needs an \"id\")")
        return name

    def _call(self, path: str, body: dict | None, limit: int) -> ServerReply:
        """One request, whole within `self.timeout`, its reply a JSON object, or a ServerError quoting the reply."""
        where = self.url + path
        data = None if body is None else json.dumps(body).encode()
        key = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        reply = fetch(where, data, timeout=self.timeout, limit=limit, error=ServerError,
                      hint=": is the server running?", headers=key)
        if reply.status == 401:  # vLLM's answer to a missing or wrong key: say which, not only "HTTP 401"
            said = "refused the API key it was given" if self.api_key else "needs an API key and none was given"
            raise ServerError(f"{where} {said} (HTTP 401): pass the key the server was started with "
                              f"(RemoteEngine(..., api_key=KEY), teachspec serve --api-key KEY); it sent "
                              f"{quote(reply.body, 300)}")
        if reply.status != 200:
            raise ServerError(f"{where} refused the request (HTTP {reply.status}): {quote(reply.body, 300)}")
        out = json_of(reply, ServerError)
        if not isinstance(out, dict):
            raise ServerError(f"{where} answered with JSON that is not an object: {quote(reply.body)}")
        return ServerReply(out, where, reply.body)

    # -- what a reply must hold ----------------------------------------------------------------------------------

    def _bad(self, out: dict, what: str) -> ServerError:
        """The error for a reply of the wrong shape: the server, what is wrong, and the start of what it sent
        (a reply made by hand, with no bytes behind it, is quoted as JSON)."""
        where = getattr(out, "where", self.url)
        sent = getattr(out, "sent", None)
        return ServerError(f"{where} {what}. It sent {quote(json.dumps(out, default=repr) if sent is None else sent)}")

    def _choices(self, out: dict) -> list[dict]:
        choices = out.get("choices")
        if not isinstance(choices, list) or not choices or not all(isinstance(c, dict) for c in choices):
            raise self._bad(out, f"answered without choices (a non-empty list of objects), got {_short(choices)}")
        return choices

    def _logprob(self, out: dict, row: Any, token: int, position: int) -> float:
        """log p of `token` at `position` from one row of prompt_logprobs ({"id": {"logprob": x, ...}, ...})."""
        entry = row.get(str(token)) if isinstance(row, dict) else None
        value = entry.get("logprob") if isinstance(entry, dict) else None
        # -inf is a probability of 0; NaN and +inf are no probability at all
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value) or value == math.inf:
            raise self._bad(out, f"gave no log probability (a number, not NaN) of token {token} at prompt position "
                                 f"{position}, got {_short(value)}")
        return float(value)

    # -- the trace -----------------------------------------------------------------------------------------------

    def _ids_of(self, prompt) -> list[int]:
        if isinstance(prompt, str):
            return self.pair.encode(prompt)
        return [int(t) for t in prompt]

    def _start(self, ids: list[int]) -> int:
        self._ids += 1
        self.events.emit(RequestStart, request=self._ids, prompt_tokens=len(ids), prompt=list(ids))
        return self._ids

    def _stats(self, out: dict, prompt: int, seconds: float, new: int) -> Stats:
        usage = out.get("usage") or {}  # a server may leave usage, or its details, out: nothing was cached then
        details = (usage.get("prompt_tokens_details") or {}) if isinstance(usage, dict) else None
        if not isinstance(details, dict):
            raise self._bad(out, f"gave a usage that is not an object with prompt_tokens_details, got {_short(usage)}")
        cached = details.get("cached_tokens") or 0
        # a cached count is drawn as the prompt's cached part: it must be a part of the prompt
        if not _whole_numbers([cached]) or cached > prompt:
            raise self._bad(out, f"counted cached_tokens {_short(cached)}; it must be a whole number from 0 to the "
                                 f"{prompt} tokens of the prompt")
        return Stats(new_tokens=new, prompt_tokens=prompt, cached_tokens=cached, wall_s=seconds)

    def _finish(self, request: int, stats: Stats, reason: str) -> None:
        self.events.emit(Prefill, request=request, cached=stats.cached_tokens,
                         computed=stats.prompt_tokens - stats.cached_tokens, ms=0.0)
        self.events.emit(Finish, request=request, new_tokens=stats.new_tokens, reason=reason,
                         ms=stats.wall_s * 1e3)



def _whole_numbers(values: Any) -> bool:
    """Whether `values` is a list of whole numbers >= 0 (token ids, indexes, counts); JSON's true is not one."""
    return isinstance(values, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)


def _short(value: Any) -> str:
    """A value as an error shows it: the start of its JSON (null, not None)."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= 80 else text[:77] + "..."
