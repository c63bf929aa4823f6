"""The local engine's token sampler: one token per row from its logits (temperature, top-p, greedy) with its
log-probability, each row drawing its uniform from its own generator."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trace_rl.rollout.backends import SamplingParams


def sample_tokens(
    logits: torch.Tensor, params: Sequence[SamplingParams], generators: Sequence[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row. logits (R, V); returns (tokens int64 (R,), logprobs float32 (R,)).

    Row r samples from softmax(logits_r / T_r) truncated to the smallest top-p set (inverse-CDF with a
    uniform from its own generator), or takes the argmax when T_r = 0. The logprob is under the untruncated
    softmax(logits_r / T_r) (T = 1 for greedy).
    """
    logits = logits.float().cpu()
    temp = torch.tensor([p.temperature for p in params], dtype=torch.float32)
    top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32)
    greedy = temp == 0
    scaled = logits / torch.where(greedy, torch.ones_like(temp), temp)[:, None]
    logp = torch.log_softmax(scaled, dim=-1)
    probs = logp.exp()
    u = torch.cat([torch.rand(1, generator=g) for g in generators])
    # each row by its own rule, so that a row's token never depends on the other rows of the batch: the
    # vocabulary order for top-p 1, the sorted nucleus only for the rows with top-p < 1
    cdf = probs.cumsum(-1)
    tok = (
        torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).clamp_max(cdf.shape[1] - 1).squeeze(1)
    )
    nucleus = top_p < 1
    if bool(nucleus.any()):
        sorted_p, order = probs[nucleus].sort(dim=-1, descending=True)
        keep = (sorted_p.cumsum(-1) - sorted_p) < top_p[nucleus, None]
        ncdf = (sorted_p * keep).cumsum(-1)
        j = torch.searchsorted(ncdf, (u[nucleus] * ncdf[:, -1])[:, None], right=True)
        tok[nucleus] = order.gather(1, j.clamp_max(ncdf.shape[1] - 1)).squeeze(1)
    tok = torch.where(greedy, logits.argmax(-1), tok)
    return tok, logp.gather(1, tok[:, None]).squeeze(1)
