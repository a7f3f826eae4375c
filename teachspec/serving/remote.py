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
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from teachspec.decode import Generation
from teachspec.events import EventLog, Finish, Prefill, RequestStart
from teachspec.program.score import Scored
from teachspec.serving.launch import ServerError, VllmServer
from teachspec.stats import Stats


class RemoteEngine:
    """`generate` and `score` on an OpenAI-compatible server; `pair` gives the tokenizer both sides share."""

    def __init__(self, server: VllmServer | str, pair, events: EventLog | None = None, model: str | None = None,
                 timeout: float = 300.0):
        if isinstance(server, VllmServer):
            self.url, model = server.url, model or server.model
        elif isinstance(server, str) and server.startswith(("http://", "https://")):
            self.url = server.rstrip("/")
        else:
            raise TypeError(f"server must be a VllmServer (from start_vllm) or its http:// URL, got {server!r}")
        if not all(hasattr(pair, name) for name in ("encode", "decode", "eos", "tokenizer")):
            raise TypeError(f"pair must be a teachspec Pair (load_pair(...)), whose tokenizer the server shares, got "
                            f"{type(pair).__name__}")
        self.pair, self.timeout = pair, timeout
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
        choice = out["choices"][0]
        tokens = [int(t) for t in choice.get("token_ids") or []]
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
        scored = []
        for choice in sorted(out["choices"], key=lambda c: c["index"]):
            tail = tails[choice["index"]]
            rows = choice.get("prompt_logprobs")
            if not rows or len(rows) != len(ids) + len(tail):
                raise ServerError(f"{self.url} gave no prompt_logprobs for {len(ids) + len(tail)} prompt tokens: is "
                                  f"it a vLLM server? (select needs the log probability of each prompt token)")
            logprobs = [float(rows[len(ids) + i][str(t)]["logprob"]) for i, t in enumerate(tail)]
            stats = Stats(prompt_tokens=len(ids) + len(tail) - 1, wall_s=seconds / len(tails))
            self._finish(requests[choice["index"]], stats, "score")
            scored.append(Scored(tail, logprobs, stats))
        return scored

    # -- HTTP ----------------------------------------------------------------------------------------------------

    def complete(self, body: dict) -> dict:
        """POST /v1/completions; a ServerError names the server and quotes its complaint."""
        return self._call("/v1/completions", {"model": self.model, **body})

    def _served_model(self) -> str:
        models = self._call("/v1/models", None).get("data") or []
        if not models:
            raise ServerError(f"{self.url}/v1/models lists no model")
        return models[0]["id"]

    def _call(self, path: str, body: dict | None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:300]
            raise ServerError(f"{self.url}{path} refused the request (HTTP {e.code}): {detail}") from None
        except (urllib.error.URLError, OSError) as e:
            raise ServerError(f"nothing answers at {self.url}{path} ({getattr(e, 'reason', e)}): is the server "
                              f"running?") from None
        except json.JSONDecodeError:
            raise ServerError(f"{self.url}{path} answered with something that is not JSON") from None

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
        details = (out.get("usage") or {}).get("prompt_tokens_details") or {}
        return Stats(new_tokens=new, prompt_tokens=prompt, cached_tokens=int(details.get("cached_tokens") or 0),
                     wall_s=seconds)

    def _finish(self, request: int, stats: Stats, reason: str) -> None:
        self.events.emit(Prefill, request=request, cached=stats.cached_tokens,
                         computed=stats.prompt_tokens - stats.cached_tokens, ms=0.0)
        self.events.emit(Finish, request=request, new_tokens=stats.new_tokens, reason=reason,
                         ms=stats.wall_s * 1e3)

