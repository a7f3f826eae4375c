"""A log holding one event of every kind (or more), each field set: tests/events/test_events.py checks that it holds
every kind and round-trips them; tests/events/test_trace_validation.py damages each of its fields on its own. A new
event kind gets one event here."""

from teachspec.events import Accept, Bonus, Counters, Draft, Evict, EventLog, Finish, Health, Insert, Lock, Match, \
    Prefill, ProgramSpan, ProgramStep, Reject, ReplicaLog, RequestStart, Resample, Route, Score, Split, TreeDraft, \
    Unlock, Verify


def sample_log() -> EventLog:
    log = EventLog()
    log.emit(RequestStart, 1, prompt_tokens=3, prompt=[5, 6, 7])
    log.emit(Prefill, 1, cached=1, computed=2, ms=1.5)
    log.emit(Draft, 1, step=0, position=3, tokens=[9, 8], q=[0.5, 0.25], drafter="model", ms=0.3)
    log.emit(Verify, 1, step=0, position=3, n=3, ms=2.0)
    log.emit(Accept, 1, step=0, position=3, i=0, token=9, p=0.6, q=0.5, u=0.1, top_p=[[9, 0.6], [2, 0.1]])
    log.emit(Reject, 1, step=0, position=4, i=1, token=8, p=0.05, q=0.25, u=0.7)
    log.emit(Resample, 1, step=0, position=4, i=1, token=2, p=0.4, q=0.0)
    log.emit(Verify, 1, step=1, position=5, n=1, ms=1.0)  # plain decoding: a pass over one position, then its token
    log.emit(Bonus, 1, step=1, position=5, token=3, p=0.9)
    log.emit(Verify, 1, step=2, position=6, n=1, ms=1.0)
    log.emit(Bonus, 1, step=2, position=6, token=4, p=0.3)
    log.emit(TreeDraft, 1, step=3, position=6, parents=[-1, 0, 0], tokens=[4, 11, 12], drafter="ngram", ms=0.1)
    log.emit(Match, 1, node=2, length=4, path=[0, 1, 2])
    log.emit(Insert, 1, node=3, parent=2, tokens=5, cached=4)
    log.emit(Split, 1, node=2, new=4, parent=1, at=2)
    log.emit(Lock, 1, node=3, locks=1, protected=9)
    log.emit(Unlock, 1, node=3, locks=0, protected=0)
    log.emit(Evict, -1, node=3, parent=2, tokens=5)
    log.emit(Finish, 1, new_tokens=4, reason="eos", ms=9.0)
    log.emit(ProgramStep, -1, run=0, program="quiz", branch=0, call="select", name="answer", line=4, position=7)
    log.emit(RequestStart, 2, prompt_tokens=8, prompt=[5, 6, 7, 9, 8, 2, 3, 4])
    log.emit(Score, 2, position=7, tokens=[4], logprobs=[-0.7])
    log.emit(Finish, 2, new_tokens=0, reason="score", ms=3.0)
    log.emit(ProgramSpan, -1, run=0, branch=0, call="select", name="answer", start=7, stop=8, text=" yes")
    log.emit(Counters, -1, source="http://127.0.0.1:8000", drafts=2, draft_tokens=6, accepted=4,
             accepted_per_position=[2, 1, 1], prefix_queries=40, prefix_hits=32, requests=1)
    log.emit(Route, 3, replica=1, policy="cache_aware", key="tenant 0", prompt_tokens=64)
    ReplicaLog(log, 1).emit(Insert, 3, node=1, parent=0, tokens=32, cached=0)
    log.emit(Health, -1, replica=1, url="http://127.0.0.1:8001", state="down")
    return log
