"""Sampling invariants of the local engine (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from trace_rl.rollout.backends import SamplingParams  # noqa: E402
from trace_rl.rollout.engine import _common_prefix, _PromptSet  # noqa: E402
from trace_rl.rollout.sampling import sample_tokens  # noqa: E402

logit_rows = st.lists(st.floats(-20, 20, allow_nan=False, width=32), min_size=2, max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(logit_rows, min_size=1, max_size=4),
    top_p=st.floats(0.05, 1.0),
    temp=st.floats(0.1, 3.0),
    seed=st.integers(0, 2**31),
)
def test_sampled_token_lies_in_the_top_p_set_and_logprob_matches(rows, top_p, temp, seed):
    width = min(len(r) for r in rows)
    logits = torch.tensor([r[:width] for r in rows], dtype=torch.float32)
    params = [SamplingParams(temperature=temp, top_p=top_p)] * len(rows)
    gens = [torch.Generator().manual_seed(seed + i) for i in range(len(rows))]
    tok, lp = sample_tokens(logits, params, gens)
    logp = torch.log_softmax(logits / temp, dim=-1)
    for r in range(len(rows)):
        p = logp[r].exp().numpy().astype(np.float64)
        order = np.argsort(-p, kind="stable")
        # the nucleus: smallest prefix of the sorted probabilities whose mass reaches top_p (ties may reorder
        # equal probabilities, so test membership by probability, not by index)
        before = np.cumsum(p[order]) - p[order]
        nucleus_min = p[order][before < top_p].min()
        assert p[int(tok[r])] >= nucleus_min - 1e-6
        assert lp[r].item() == pytest.approx(logp[r, int(tok[r])].item(), abs=1e-5)


@given(a=st.lists(st.integers(0, 3), max_size=20), b=st.lists(st.integers(0, 3), max_size=20))
def test_common_prefix(a, b):
    n = _common_prefix(np.asarray(a, np.int64), np.asarray(b, np.int64))
    assert a[:n] == b[:n]
    assert n == min(len(a), len(b)) or a[n] != b[n]


@given(
    prompts=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=80), max_size=20),
    query=st.lists(st.integers(0, 3), min_size=1, max_size=90),
)
def test_prompt_set_longest_common_prefix_is_the_pairwise_max(prompts, query):
    # the admission round's vectorised deferral test against the pairwise definition (grows past 8 rows and
    # 64 columns)
    got = _PromptSet()
    q = np.asarray(query, np.int64)
    for i, p in enumerate(prompts):
        got.add(np.asarray(p, np.int64))
        want = max(_common_prefix(q, np.asarray(x, np.int64)) for x in prompts[: i + 1])
        assert got.longest_common_prefix(q) == want
    assert prompts or got.longest_common_prefix(q) == 0
