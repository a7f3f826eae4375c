"""The copy stage's data: every row it makes is what its docstring says, so the target learns to copy from it."""

import torch

from teachspec.tools.train import copy_batches, short_runs

SEP, EOS, VOCAB = [7, 7], 0, 50


def told_twice(row: list[int], lengths: range, between: list[int], end: list[int]) -> list[int] | None:
    """The opening piece if the row starts with piece + between + piece + end, for a piece length in `lengths`."""
    for n in lengths:
        m = n + len(between)
        if row[:n] == row[m:m + n] and row[m - len(between):m] == between and row[m + n:m + n + len(end)] == end:
            return row[:n]
    return None


def test_copy_batches_tell_each_piece_twice():
    stream = torch.randint(1, VOCAB, (5000,), generator=torch.Generator().manual_seed(0))
    text = stream.tolist()
    data = copy_batches(stream, batch=8, seq_len=256, sep=SEP, eos=EOS, vocab=VOCAB, gen=torch.Generator())
    for _ in range(3):
        x, y = next(data)
        assert x.shape == y.shape == (8, 256)
        assert torch.equal(x[:, 1:], y[:, :-1])  # y is x one token on
        for i, row in enumerate(x.tolist()):
            if i % 4 == 0:  # a plain window of the corpus
                start = next(s for s in range(len(text)) if text[s:s + 256] == row)
                assert text[start:start + 256] == row
            elif i % 4 == 1:  # a corpus passage, a blank line, the passage again, EOS
                passage = told_twice(row, range(16, 101), SEP, [EOS])
                assert passage is not None, f"row {i} is not a passage told twice: {row[:40]}"
                assert any(text[s:s + len(passage)] == passage for s in range(len(text)))
            else:  # a random run told twice with nothing between
                assert told_twice(row, range(8, 61), [], []) is not None, f"row {i}: {row[:40]}"


def test_copy_batches_are_seeded():
    stream = torch.arange(1, 3000) % VOCAB
    a = copy_batches(stream, 4, 64, SEP, EOS, VOCAB, torch.Generator().manual_seed(3))
    b = copy_batches(stream, 4, 64, SEP, EOS, VOCAB, torch.Generator().manual_seed(3))
    assert torch.equal(next(a)[0], next(b)[0])


def test_short_runs_are_random_runs_told_twice():
    x, y = next(short_runs(batch=16, seq_len=32, vocab=VOCAB, gen=torch.Generator().manual_seed(1)))
    assert x.shape == y.shape == (16, 32)
    assert torch.equal(x[:, 1:], y[:, :-1])
    for row in torch.cat([x, y[:, -1:]], 1).tolist():
        while len(row) >= 2 * 13:  # whole runs only: the last one may be cut by the row's end
            run = told_twice(row, range(4, 13), [], [])
            assert run is not None, f"not a run of 4-12 told twice: {row}"
            row = row[2 * len(run):]


def test_the_heads_second_pass_reads_real_entries_before_it_and_its_own_guess():
    """EAGLE-3's training-time test in one sequence: pass 2's entry t must compute what drafting computes for a
    second guess: the cache holds pass 1's entries before t (built from real features), and entry t reads the
    guessed feature."""
    from helpers.models import build_model
    from teachspec import kv
    from teachspec.models.eagle import EagleHead, head_config
    from teachspec.tools.train import two_passes

    torch.manual_seed(0)
    head = EagleHead(head_config(build_model("llama", hidden=64))).eval()
    n, h = 6, 64
    real, guessed, e = torch.randn(1, n, h), torch.randn(1, n, h), torch.randn(1, n, h)
    mask, pos = two_passes(n)
    with torch.no_grad():
        both = head(torch.cat([real, guessed[:, 1:]], 1), torch.cat([e, e[:, 1:]], 1), pos, attention_mask=mask)
        for t in range(1, n):  # pass 2's entry at position t + 1
            cache = kv.new_cache(head.layers)
            head(real[:, :t], e[:, :t], pos[:, :t], cache=cache)
            step = head(guessed[:, t:t + 1], e[:, t:t + 1], pos[:, t:t + 1], cache=cache)
            assert torch.allclose(both[0, n - 1 + t], step[0, 0], atol=1e-5)


def test_the_eagle_loss_trains_the_head_and_leaves_the_target_alone():
    from helpers.models import build_model
    from teachspec.models.eagle import EagleHead, head_config
    from teachspec.tools.train import eagle_loss

    torch.manual_seed(0)
    target = build_model("llama", hidden=64).eval().requires_grad_(False)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    head = EagleHead(head_config(target))
    loss_fn, x = eagle_loss(target), torch.randint(0, 4096, (4, 33))
    opt = torch.optim.Adam(head.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        loss = loss_fn(head, x, None)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert all(torch.equal(v, target.state_dict()[k]) for k, v in before.items())
