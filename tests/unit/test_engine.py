"""Local engine: logits equal the model's own forward, prefix reuse, cache carry, seeds, sampling math."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trace_rl.rollout.backends import SamplingParams  # noqa: E402
from trace_rl.rollout.engine import LocalEngine, completion_seed, length_groups  # noqa: E402
from trace_rl.rollout.engine_forward import (  # noqa: E402
    cache_spans,
    forward_groups,
    forward_reference,
    span_cuts,
)
from trace_rl.rollout.sampling import sample_tokens  # noqa: E402

PROMPT = list(range(5, 40))  # 35 arbitrary ids of the 512-token vocabulary


def reference_logprobs(model, ids: list[int], start: int) -> np.ndarray:
    """log p(ids[t] | ids[:t]) for t >= start under the model's own forward (temperature 1)."""
    with torch.no_grad():
        logp = model(torch.tensor([ids])).logits[0].log_softmax(-1)
    tgt = torch.tensor(ids[start:])
    return logp[start - 1 : -1].gather(1, tgt[:, None]).squeeze(1).numpy()


def test_greedy_matches_hf_generate_and_logprobs(tiny_policy):
    eng = LocalEngine(tiny_policy, max_batch=4)
    sp = SamplingParams(max_new_tokens=12, temperature=0.0, stop_ids=())
    (c,) = eng.generate_sync(PROMPT, sp)
    with torch.no_grad():
        ref = tiny_policy.model.generate(
            torch.tensor([PROMPT]), max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    assert c.token_ids.tolist() == ref[0, len(PROMPT) :].tolist()
    assert c.finish_reason == "length"
    np.testing.assert_allclose(
        c.logprobs,
        reference_logprobs(tiny_policy.model, PROMPT + c.token_ids.tolist(), len(PROMPT)),
        atol=1e-4,
    )


def test_sampled_logprobs_match_model_under_batching_and_forks(tiny_policy):
    # 3 completions from one prefix plus an unrelated request in the same decode batch: every row's
    # logprobs must equal the model's own forward on that row's full sequence (temperature 1).
    eng = LocalEngine(tiny_policy, max_batch=8)
    sp = SamplingParams(max_new_tokens=10, temperature=1.0, seed=7, stop_ids=())

    async def both():
        import asyncio

        return await asyncio.gather(eng.generate(PROMPT, sp, 3), eng.generate(PROMPT[::-1][:20], sp, 1))

    import asyncio

    forks, (other,) = asyncio.run(both())
    for c in [*forks, other]:
        prompt = PROMPT if c is not other else PROMPT[::-1][:20]
        ref = reference_logprobs(tiny_policy.model, prompt + c.token_ids.tolist(), len(prompt))
        np.testing.assert_allclose(c.logprobs, ref, atol=1e-4)
    assert len({tuple(c.token_ids.tolist()) for c in forks}) == 3  # independent samples


def test_prefix_computed_once_and_cache_carried_across_turns(tiny_policy):
    eng = LocalEngine(tiny_policy, max_batch=8)
    sp = SamplingParams(max_new_tokens=5, temperature=1.0, seed=1, stop_ids=())
    cs = eng.generate_sync(PROMPT, sp, n=4)
    # 4 continuations of a 35-token prompt: the prompt runs through the model once
    assert eng.stats.prefill_tokens == 35 and eng.stats.reused_tokens == 0
    assert eng.stats.sampled_tokens == 20
    # next turn of completion 0: prompt + its 5 tokens + 3 observation ids. Cached: the 35 prompt tokens and
    # the first 4 sampled ones (the 5th was sampled but never fed back), so 39 reused, 1 + 3 = 4 computed.
    turn2 = PROMPT + cs[0].token_ids.tolist() + [7, 8, 9]
    eng.reset_stats()
    (c2,) = eng.generate_sync(turn2, sp)
    assert eng.stats.reused_tokens == 39 and eng.stats.prefill_tokens == 4
    np.testing.assert_allclose(
        c2.logprobs,
        reference_logprobs(tiny_policy.model, turn2 + c2.token_ids.tolist(), len(turn2)),
        atol=1e-4,
    )
    # a replay from a prefix of an existing sequence copies it: only the last prompt token is computed
    eng.reset_stats()
    eng.generate_sync(PROMPT[:30], sp, n=3)
    assert eng.stats.reused_tokens == 29 and eng.stats.prefill_tokens == 1


def test_concurrent_requests_for_one_uncached_prefix_compute_it_once(tiny_policy):
    import asyncio

    eng = LocalEngine(tiny_policy, max_batch=8)

    async def three():
        return await asyncio.gather(
            *[eng.generate(PROMPT, SamplingParams(3, 1.0, seed=s, stop_ids=())) for s in range(3)]
        )

    outs = asyncio.run(three())
    # the first computes all 35 prompt tokens; the other two wait one round, copy 34 and compute the last one
    assert eng.stats.prefill_tokens == 35 + 1 + 1 and eng.stats.reused_tokens == 34 + 34
    for c in outs:
        ref = reference_logprobs(tiny_policy.model, PROMPT + c[0].token_ids.tolist(), len(PROMPT))
        np.testing.assert_allclose(c[0].logprobs, ref, atol=1e-4)


def test_same_seed_same_tokens_and_seed_changes_them(tiny_policy):
    sp = SamplingParams(max_new_tokens=8, temperature=1.0, top_p=0.9, seed=3, stop_ids=())
    a = LocalEngine(tiny_policy).generate_sync(PROMPT, sp, n=3)
    b = LocalEngine(tiny_policy).generate_sync(PROMPT, sp, n=3)
    c = LocalEngine(tiny_policy).generate_sync(PROMPT, SamplingParams(8, 1.0, 0.9, seed=4, stop_ids=()), n=3)
    assert [x.token_ids.tolist() for x in a] == [x.token_ids.tolist() for x in b]
    assert [x.token_ids.tolist() for x in a] != [x.token_ids.tolist() for x in c]


def test_stop_token_ends_completion(tiny_policy):
    eng = LocalEngine(tiny_policy)
    sp = SamplingParams(max_new_tokens=12, temperature=0.0, stop_ids=())
    (greedy,) = eng.generate_sync(PROMPT, sp)
    first = int(greedy.token_ids[0])
    (c,) = eng.generate_sync(PROMPT, SamplingParams(12, 0.0, stop_ids=(first,)))
    assert c.token_ids.tolist() == [first] and c.finish_reason == "stop"


def test_tiny_top_p_is_greedy(tiny_policy):
    eng = LocalEngine(tiny_policy)
    (g,) = eng.generate_sync(PROMPT, SamplingParams(8, 0.0, stop_ids=()))
    (p,) = eng.generate_sync(PROMPT, SamplingParams(8, 1.0, top_p=1e-6, seed=9, stop_ids=()))
    assert g.token_ids.tolist() == p.token_ids.tolist()


def test_sample_logprobs_hand_computed():
    # logits [0, ln 3]: softmax = [1/4, 3/4]; at temperature 0.5 the logits double: [0, ln 9] -> [1/10, 9/10]
    logits = torch.tensor([[0.0, math.log(3.0)], [0.0, math.log(3.0)]])
    gens = [torch.Generator().manual_seed(i) for i in range(2)]
    params = [SamplingParams(temperature=1.0), SamplingParams(temperature=0.5)]
    tok, lp = sample_tokens(logits, params, gens)
    expect = [[math.log(0.25), math.log(0.75)], [math.log(0.1), math.log(0.9)]]
    for r in range(2):
        assert lp[r].item() == pytest.approx(expect[r][int(tok[r])], abs=1e-6)
    # greedy takes the argmax and reports its temperature-1 logprob, log(3/4)
    tok, lp = sample_tokens(logits[:1], [SamplingParams(temperature=0.0)], gens[:1])
    assert int(tok[0]) == 1 and lp[0].item() == pytest.approx(math.log(0.75), abs=1e-6)


def test_sample_frequencies_follow_probabilities():
    # 4000 draws from [1/4, 3/4]: the share of token 1 is 0.75 within 4 standard errors (sqrt(.1875/4000) ~ .0068)
    logits = torch.tensor([[0.0, math.log(3.0)]]).expand(4000, 2)
    gens = [torch.Generator().manual_seed(completion_seed(0, i)) for i in range(4000)]
    tok, _ = sample_tokens(logits, [SamplingParams()] * 4000, gens)
    assert abs(tok.float().mean().item() - 0.75) < 4 * 0.0068


def test_bad_requests_raise(tiny_policy):
    eng = LocalEngine(tiny_policy)
    with pytest.raises(ValueError, match="empty"):
        eng.generate_sync([], SamplingParams())
    with pytest.raises(ValueError, match="n must be"):
        eng.generate_sync([1, 2], SamplingParams(), n=0)
    with pytest.raises(ValueError, match=r"\[0, 512\)"):
        eng.generate_sync([1, 9999], SamplingParams())
    with pytest.raises(ValueError, match="max_new_tokens"):
        SamplingParams(max_new_tokens=0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=float("nan"))


def test_completion_seeds_distinct():
    seeds = {completion_seed(s, i) for s in range(20) for i in range(20)}
    assert len(seeds) == 400 and all(0 <= s < 2**63 for s in seeds)


def test_prefix_source_row_not_reused_by_another_request_of_the_same_round(tiny_policy):
    # Regression: two requests admitted in one round, each copying a cached prefix from a different parked
    # row, with every row parked (max_rows = 2). Row 0 caches P1, row 1 caches P2. A (prefix of P2) was
    # handed row 0 (least recently used) and copied P2's prefix into it; B (prefix of P1) then copied its
    # prefix from row 0, getting P2's keys/values, and its logprobs were off by up to ~0.7 nats.
    eng = LocalEngine(tiny_policy, max_batch=2, max_rows=2)
    sp = SamplingParams(max_new_tokens=4, temperature=1.0, seed=3, stop_ids=())
    p1, p2 = list(range(10, 40)), list(range(100, 130))
    eng.generate_sync(p1, sp)  # row 0
    eng.generate_sync(p2, sp)  # row 1
    a, b = [*p2[:20], 300, 301, 302], [*p1[:20], 400, 401, 402]

    async def both():
        import asyncio

        return await asyncio.gather(eng.generate(a, sp), eng.generate(b, sp))

    import asyncio

    eng.reset_stats()
    (ca,), (cb,) = asyncio.run(both())
    assert eng.stats.reused_tokens == 40  # both took their 20-token prefix from the cache
    for prompt, c in [(a, ca), (b, cb)]:
        ref = reference_logprobs(tiny_policy.model, prompt + c.token_ids.tolist(), len(prompt))
        np.testing.assert_allclose(c.logprobs, ref, atol=1e-4)


def _mixed_workload(eng):
    """Concurrent multi-turn episodes with replays on one engine: varied prompt lengths, n, top-p, stop ids;
    every episode's second turn extends its parked row, and replays copy a prefix of another row."""
    import asyncio

    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 512, int(rng.integers(3, 90))).tolist() for _ in range(10)]

    async def episode(i, prompt):
        for _ in range(i):
            await asyncio.sleep(0)  # staggered arrivals: requests join while others decode
        sp = SamplingParams(6 + 3 * i, 1.0, top_p=0.9 if i % 2 else 1.0, seed=i, stop_ids=(i, 500))
        first = await eng.generate(prompt, sp, n=1 + i % 3)
        turn2 = prompt + first[0].token_ids.tolist() + [7, 8, 9][: 1 + i % 3]
        second = await eng.generate(turn2, SamplingParams(8, 1.0, seed=100 + i, stop_ids=()))
        replay = await eng.generate(turn2[: len(prompt) + 2], SamplingParams(5, 0.7, seed=200 + i), n=2)
        return [(prompt, first), (turn2, second), (turn2[: len(prompt) + 2], replay)]

    async def run():
        return await asyncio.gather(*[episode(i, p) for i, p in enumerate(prompts)])

    async def gap():
        # A (row 0) and C decode long; B's six short completions (rows 1-6, plus row 7) finish early, and C,
        # arriving while B decodes, takes row 8: the decode batch is then rows 0 and 8 with idle rows between
        sp_long = SamplingParams(30, 1.0, seed=1, stop_ids=())

        async def late():
            for _ in range(3):
                await asyncio.sleep(0)
            return await eng.generate(prompts[2], sp_long)

        a, b, c = await asyncio.gather(
            eng.generate(prompts[0], sp_long),
            eng.generate(prompts[1], SamplingParams(3, seed=2), n=7),
            late(),
        )
        return [(prompts[0], a), (prompts[1], b), (prompts[2], c)]

    return [asyncio.run(gap()), *asyncio.run(run())]


def test_fast_forward_matches_reference_engine_and_model(tiny_policy, monkeypatch):
    # The fast forward (active rows only, attention on cache views per span, admitted prompts in the decode
    # step's forward) against the original forward and schedule (fast_decode=False) on the same requests: same
    # tokens, log-probabilities within 1e-4 of each other and of the model's own forward, while spans with idle
    # rows, masks for unequal lengths, several spans per step and decode steps that also prefill all occur
    # (max_rows 24 > max_batch 12 leaves parked rows between active ones).
    import trace_rl.rollout.engine as engine_module

    query_lengths = []  # per forward of the fast engine: each group's query length

    def groups_seen(model, k, v, groups):
        query_lengths.append([g[1].shape[1] for g in groups])
        return forward_groups(model, k, v, groups)

    monkeypatch.setattr(engine_module, "forward_groups", groups_seen)
    spans_seen = []
    fast = LocalEngine(tiny_policy, max_batch=12, max_rows=24)
    spans = fast._spans

    def record(rows, start, length):
        out = spans(rows, start, length)
        if length == 1:  # decode steps
            spans_seen.append(out)
        return out

    fast._spans = record
    got = _mixed_workload(fast)
    ref = _mixed_workload(LocalEngine(tiny_policy, max_batch=12, max_rows=24, fast_decode=False))
    assert fast.stats.decode_steps > 20
    assert any(lengths[0] == 1 and len(lengths) > 1 for lengths in query_lengths)  # decode + prefill in one
    assert any(len(s) > 1 for s in spans_seen)  # several spans in one step
    assert any(sp[5] is not None for s in spans_seen for sp in s)  # a span with idle rows
    assert any(sp[6] is not None for s in spans_seen for sp in s)  # a span with rows of unequal lengths
    worst = 0.0
    for ep_fast, ep_ref in zip(got, ref, strict=True):
        for (prompt, cs), (prompt_ref, cs_ref) in zip(ep_fast, ep_ref, strict=True):
            assert prompt == prompt_ref
            for c, c_ref in zip(cs, cs_ref, strict=True):
                assert c.token_ids.tolist() == c_ref.token_ids.tolist()
                assert c.finish_reason == c_ref.finish_reason
                worst = max(worst, float(np.abs(c.logprobs - c_ref.logprobs).max()))
    assert worst <= 1e-4
    # the model's own forward on the first and second turns (temperature 1; the replays sample at 0.7)
    for ep in got:
        for prompt, cs in ep[:2]:
            for c in cs:
                ref_lp = reference_logprobs(tiny_policy.model, prompt + c.token_ids.tolist(), len(prompt))
                np.testing.assert_allclose(c.logprobs, ref_lp, atol=1e-4)


def test_forward_groups_equals_each_group_alone(tiny_policy):
    # a decode step (rows 0-4, unequal lengths, row 2 idle) and two prefill groups of other lengths in one pass
    # of the weights: the same logits and the same keys/values in the cache as three separate forwards of the
    # original (reference) forward
    cfg = tiny_policy.model.config
    rng = np.random.default_rng(0)
    shape = (12, cfg.num_key_value_heads, 64, cfg.head_dim)
    k0 = [
        torch.from_numpy(rng.standard_normal(shape).astype(np.float32)) for _ in range(cfg.num_hidden_layers)
    ]
    v0 = [
        torch.from_numpy(rng.standard_normal(shape).astype(np.float32)) for _ in range(cfg.num_hidden_layers)
    ]
    cpu = torch.device("cpu")

    def group(rows, start, length, last=None):
        rows, start = np.asarray(rows), np.asarray(start)
        ids = torch.from_numpy(rng.integers(0, 512, (rows.size, length)))
        return (rows, ids, start, cache_spans(rows, start, length, cpu, span_positions=8), last)

    groups = [
        group([0, 1, 3, 4], [20, 23, 9, 30], 1),
        group([6, 8], [5, 12], 7, np.array([6, 3])),  # right-padded: row 8's tail is 4 tokens
        group([9], [0], 20),
    ]
    k1, v1 = [k.clone() for k in k0], [v.clone() for v in v0]
    alone = torch.cat(
        [
            forward_reference(tiny_policy.model, k1, v1, rows, ids, torch.from_numpy(start), last=last)
            for rows, ids, start, _, last in groups
        ]
    )
    k2, v2 = [k.clone() for k in k0], [v.clone() for v in v0]
    together = forward_groups(tiny_policy.model, k2, v2, groups)
    assert together.shape == (7, cfg.vocab_size)
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)
    for a, b in zip(k1 + v1, k2 + v2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert any(not torch.equal(a, b) for a, b in zip(k0, k2, strict=True))  # the forward did write keys


def test_length_groups_pad_short_tails_apart_from_long_ones():
    # a fresh 250-token prompt and three observations of about 10 tokens: two forwards (250 + 3 x 12 + 2 x 32)
    # instead of one padding every tail to 250 (4 x 250 + 32)
    groups = length_groups([10, 250, 12, 9], 32)
    assert [g.tolist() for g in groups] == [[1], [2, 0, 3]]
    # when a forward costs more than the padding, one group
    assert [g.tolist() for g in length_groups([10, 250, 12, 9], 10_000)] == [[1, 2, 0, 3]]
    # every row once, longest first, also for equal lengths
    assert sorted(np.concatenate(length_groups([5, 5, 5], 32)).tolist()) == [0, 1, 2]
    assert [g.tolist() for g in length_groups([3], 32)] == [[0]]


def test_span_cuts_weigh_idle_rows_and_longer_rows_against_one_more_span():
    # a long idle gap splits; a one-row gap does not when a span costs more than the idle row
    assert span_cuts([0, 1, 50, 51], [100, 100, 100, 100], 192) == [2]
    assert span_cuts([0, 1, 3, 4], [100, 100, 100, 100], 192) == []
    assert span_cuts([0, 1, 3, 4], [100, 100, 100, 100], 50) == [2]
    # a much longer row next to short ones gets its own span: joining would make 8 rows read 1000 positions
    assert span_cuts(list(range(9)), [50] * 8 + [1000], 192) == [8]
    # ... but not when the extra positions cost less than a span
    assert span_cuts(list(range(9)), [50] * 8 + [60], 192) == []
    # the short rows after a long one start a new span once it pays
    assert span_cuts(list(range(10)), [1000] + [50] * 9, 192) == [1]
    assert span_cuts([7], [10], 192) == []


def test_spans_split_at_idle_gaps_and_mask_unequal_rows():
    rows = np.array([0, 1, 2, 4, 20, 21])
    start = np.array([5, 7, 7, 3, 9, 9])
    spans = cache_spans(rows, start, 1, torch.device("cpu"), span_positions=16)
    assert [(lo, hi, a, b, total) for lo, hi, a, b, total, _, _ in spans] == [
        (0, 5, 0, 4, 8),
        (20, 22, 4, 6, 10),
    ]
    (_, _, _, _, _, local, mask), (_, _, _, _, _, local2, mask2) = spans
    assert local.tolist() == [0, 1, 2, 4] and local2 is None and mask2 is None  # equal lengths: no mask
    # True = may attend: row 0 (last position 5) sees keys 0..5 of 0..7, idle row 3 sees all
    see = mask[:, 0, 0].numpy()
    assert see[0].tolist() == [True] * 6 + [False] * 2 and see[3].all() and see[1].all()
    # prefill (L = 3): causal per row from its start; True = may attend
    (_, _, _, _, total, _, pmask), _ = cache_spans(rows, start, 3, torch.device("cpu"), span_positions=48)
    assert total == 10 and pmask.shape == (5, 1, 3, 10)
    assert pmask[0, 0].numpy().sum(-1).tolist() == [6, 7, 8]
    # a span costs the same for 3 queries per row as for 1, so 16 positions of one query are 5 of three:
    # the short row 4 (3 + 3 keys of 10) now pays for a span of its own
    cut = cache_spans(rows, start, 3, torch.device("cpu"), span_positions=16)
    assert [(lo, hi, a, b) for lo, hi, a, b, *_ in cut] == [(0, 3, 0, 3), (4, 5, 3, 4), (20, 22, 4, 6)]


def test_a_rows_token_does_not_depend_on_the_top_p_of_other_rows():
    # a top-p 1 row samples from the vocabulary-order CDF whether or not a top-p < 1 row shares its batch
    logits = torch.randn(2, 512, generator=torch.Generator().manual_seed(0))
    plain, nucleus = SamplingParams(4, 1.0, seed=1), SamplingParams(4, 1.0, top_p=0.5, seed=2)
    for seed in range(20):
        alone, _ = sample_tokens(logits[:1], [plain], [torch.Generator().manual_seed(seed)])
        batched, _ = sample_tokens(
            logits, [plain, nucleus], [torch.Generator().manual_seed(seed), torch.Generator().manual_seed(7)]
        )
        nucleus_alone, _ = sample_tokens(logits[1:], [nucleus], [torch.Generator().manual_seed(7)])
        assert int(batched[0]) == int(alone[0]) and int(batched[1]) == int(nucleus_alone[0])


@pytest.mark.parametrize("fast", [True, False])
def test_a_short_tail_padded_beside_a_long_one_fits_the_cache(tiny_policy, fast):
    # a returning episode (247 cached, a 3-token tail) and a fresh 30-token prompt in one group: the padded row
    # writes keys up to position 247 + 30, past the 256 positions the cache held
    import asyncio

    eng = LocalEngine(tiny_policy, max_batch=8, fast_decode=fast)
    rng = np.random.default_rng(0)
    first = rng.integers(0, 512, 240).tolist()

    async def run():
        (c,) = await eng.generate(first, SamplingParams(8, 1.0, seed=0, stop_ids=()))
        turn2 = first + c.token_ids.tolist() + [1, 2]
        fresh = rng.integers(0, 512, 30).tolist()
        return await asyncio.gather(
            eng.generate(turn2, SamplingParams(4, seed=1, stop_ids=())),
            eng.generate(fresh, SamplingParams(4, seed=2, stop_ids=())),
        )

    done = asyncio.run(asyncio.wait_for(run(), 120))
    assert [len(c[0].token_ids) for c in done] == [4, 4]


def test_a_failing_forward_fails_the_requests_it_admitted(tiny_policy):
    import asyncio

    eng = LocalEngine(tiny_policy)

    def broken(rows, start, length):
        raise ValueError("spans failed")

    eng._spans = broken  # the admission round's forward fails before any row starts

    async def run():
        try:
            await asyncio.wait_for(eng.generate(PROMPT, SamplingParams(4, seed=0)), 60)
        except ValueError as exc:
            await asyncio.gather(eng._worker, return_exceptions=True)  # the dead worker's error, retrieved
            return str(exc)
        return "no error"

    assert asyncio.run(run()) == "spans failed"
