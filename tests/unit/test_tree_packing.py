"""The tree-packed update (optim.packing="tree") computes what the padded one ("none") does.

Packed per-path log-probabilities match the padded ones (max relative error <= 1e-5) and one optimizer step from the
same state gives the same weights (within 1e-6 relative), for trees with replays at several depths, every loss
aggregation, the KL term, both zero-advantage-row modes and several micro-batch sizes. The models run in float64
throughout (`float64_norms`: Qwen3's and Llama's RMSNorm compute in float32 even in a float64 model) so that the
comparison measures the method, not float32 rounding; `test_float32_models_agree_to_float32_rounding` bounds the
production float32 case, and benchmarks/tree_packing.py reports the float32 error on real multistep trees.
"""

from __future__ import annotations

import copy
import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.unit.model_fakes import IgnoresMasks, KeepsItsAttention  # noqa: E402
from trace_rl.advantages.losses import LOSS_AGGS  # noqa: E402
from trace_rl.spec import UpdateSpec  # noqa: E402
from trace_rl.train.packing import (  # noqa: E402
    CHAIN_ROW_TOKENS,
    ROW_TOKENS,
    pack_sequences,
    packed_logprobs,
    plan_packed_passes,
    tree_mask_support,
)
from trace_rl.train.update import (  # noqa: E402
    forward_passes,
    has_signal,
    path_rows,
    policy_update,
    sequence_logprobs,
)
from trace_rl.tree import RolloutTree  # noqa: E402
from trace_rl.types import Turn  # noqa: E402


def test_pack_sequences_builds_the_trie_of_the_token_ids() -> None:
    # hand-built: a, b share [1, 2]; c repeats a; d is a prefix of a; e shares nothing
    a, b, c, d, e = [1, 2, 3, 4], [1, 2, 5], [1, 2, 3, 4], [1, 2, 3], [7, 8]
    row = pack_sequences([a, b, c, d, e])
    # lexicographic insertion: d=[1,2,3] -> 0,1,2; a=c=[1,2,3,4] -> + 3; b=[1,2,5] -> + 4; e -> 5, 6
    assert row.token_ids.tolist() == [1, 2, 3, 4, 5, 7, 8]
    assert row.position_ids.tolist() == [0, 1, 2, 3, 2, 0, 1]
    assert [ix.tolist() for ix in row.index] == [[0, 1, 2, 3], [0, 1, 4], [0, 1, 2, 3], [0, 1, 2], [5, 6]]
    for seq, ix in zip([a, b, c, d, e], row.index, strict=True):
        assert row.token_ids[ix].tolist() == seq  # every sequence reads back its own tokens
        assert row.position_ids[ix].tolist() == list(range(len(seq)))
    allowed = row.allowed(8)
    expect = np.zeros((8, 8), bool)
    for ancestry in ([0], [0, 1], [0, 1, 2], [0, 1, 2, 3], [0, 1, 4], [5], [5, 6], [7]):  # 7: padding
        expect[ancestry[-1], ancestry] = True
    assert np.array_equal(allowed, expect)
    with pytest.raises(ValueError, match="below the row"):
        row.allowed(6)


def turn(rng: np.random.Generator, n_model: int, n_obs: int) -> Turn:
    ids = rng.integers(3, 500, n_model + n_obs).astype(np.int64)
    mask = np.r_[np.ones(n_model, np.int8), np.zeros(n_obs, np.int8)]
    # off-policy behaviour log-probs, so that some tokens clip
    return Turn(ids, mask, (-rng.uniform(0.5, 4.0, ids.size) * mask).astype(np.float32))


def replay_trees(seed: int = 0) -> list[RolloutTree]:
    """Three prompts (two sharing a 4-token system prefix), 3-4 turn roots, replays from depths 1, 2 and 3 (one a
    copy of its original's tokens), unequal rewards and one tree without signal."""
    rng = np.random.default_rng(seed)
    system = rng.integers(3, 500, 4)
    trees = []
    for k, rewards in enumerate(([1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0])):
        prompt = np.r_[system, rng.integers(3, 500, 3 + k)] if k < 2 else rng.integers(3, 500, 5)
        tree = RolloutTree.new(prompt_ids=prompt.astype(np.int64))
        tree.add_rollout([turn(rng, 4, 2) for _ in range(4)], reward=rewards[0])
        tree.add_rollout([turn(rng, 3, 3) for _ in range(3)], reward=rewards[1])
        for depth in (1, 2, 3):  # anchors at several depths of the first root rollout (nodes 1, 2, 3)
            tree.add_replay(depth, [turn(rng, 3, 1) for _ in range(4 - depth)], reward=rewards[2])
        copied = [tree.turns[n] for n in (3, 4)]  # a replay from depth 2 that sampled its original's tokens
        tree.add_replay(2, [copy.deepcopy(t) for t in copied], reward=rewards[0])
        trees.append(tree)
    return trees


def test_the_chains_rows_are_capped_at_their_own_limit() -> None:
    """The padding-free rows (chains) share a prompt's trie up to `CHAIN_ROW_TOKENS`, the dense-mask rows split it at
    `ROW_TOKENS` (its N^2 attention); both pass every path once."""
    rng = np.random.default_rng(0)
    tree = RolloutTree.new(prompt_ids=rng.integers(3, 500, 300).astype(np.int64))
    for _ in range(4):  # a trie of 300 + 4 x 300 = 1,500 tokens: above ROW_TOKENS, within CHAIN_ROW_TOKENS
        tree.add_rollout([turn(rng, 200, 100)], reward=float(rng.integers(2)))
    rows = path_rows([tree], UpdateSpec(estimator="treerpo"))
    assert ROW_TOKENS < 1500 <= CHAIN_ROW_TOKENS
    settings = UpdateSpec(estimator="treerpo", micro_tokens=0)
    for chains, n_rows in ((True, 1), (False, 2)):
        passes = forward_passes(rows, settings, packed=True, chains=chains)
        assert sum(len(packed_rows or []) for _, packed_rows, *_ in passes) == n_rows
        assert sorted(id(r) for group, *_ in passes for r in group) == sorted(id(r) for r in rows)


def _double(model: torch.nn.Module) -> torch.nn.Module:
    return copy.deepcopy(model).double()


@pytest.mark.parametrize("chains", [False, True])
def test_packed_logprobs_match_the_padded_ones_path_by_path(
    tiny_policy, float64_norms: None, chains: bool
) -> None:
    model = _double(tiny_policy.model)
    rows = path_rows(replay_trees(), UpdateSpec(estimator="treerpo"))
    passes = plan_packed_passes(rows, 0)
    assert len(passes) == 1 and len(passes[0].rows) == 3  # one packed row per prompt
    assert passes[0].tokens < sum(len(r.prompt_ids) + len(r.token_ids) for r in rows) * 0.7
    sub = [rows[i] for i in passes[0].paths]
    with torch.no_grad():
        packed = packed_logprobs(model, sub, passes[0].rows, 0.7, 0, chains=chains)
        padded = sequence_logprobs(model, sub, 0.7, 0)
    mask = torch.zeros_like(padded)
    for i, r in enumerate(sub):
        mask[i, : len(r.token_ids)] = 1.0
    assert torch.equal(packed * (1 - mask), torch.zeros_like(packed))  # 0 beyond each path's tokens
    rel = ((packed - padded).abs() / padded.abs().clamp(min=1e-30) * mask).max()
    assert float(rel) <= 1e-5
    per_path = ((packed * mask).sum(1) - (padded * mask).sum(1)).abs() / (padded * mask).sum(1).abs()
    assert float(per_path.max()) <= 1e-5


@pytest.mark.parametrize(("micro_tokens", "row_tokens"), [(0, 0), (0, 100), (0, 40), (200, 0), (200, 100)])
def test_packed_passes_hold_every_path_once_within_their_limits(micro_tokens: int, row_tokens: int) -> None:
    from trace_rl.train.packing import full_sequence

    rows = path_rows(replay_trees(), UpdateSpec(estimator="treerpo"))
    passes = plan_packed_passes(rows, micro_tokens, row_tokens)
    assert sorted(i for p in passes for i in p.paths) == list(range(len(rows)))
    for p in passes:
        assert sorted(k for g in p.rows for k in g) == list(range(len(p.paths)))
        sizes = [pack_sequences([full_sequence(rows[p.paths[k]]) for k in g]).size for g in p.rows]
        assert p.tokens == len(sizes) * max(sizes)
        assert micro_tokens == 0 or p.tokens <= micro_tokens or len(sizes) == 1
        for g, size in zip(p.rows, sizes, strict=True):
            assert len({rows[p.paths[k]].prompt_ids.tobytes() for k in g}) == 1  # one prompt per packed row
            for cap in (micro_tokens, row_tokens):
                assert cap == 0 or size <= cap or len(g) == 1


def test_packed_logprobs_match_on_a_llama_model(float64_norms: None) -> None:
    # SmolLM2 (the HF presets' policy) is a Llama: a tiny random one has the same attention code
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512,
    )  # fmt: skip
    model = LlamaForCausalLM(cfg).double().eval()
    assert tree_mask_support(model)
    rows = path_rows(replay_trees(1), UpdateSpec(estimator="treerpo"))
    passes = plan_packed_passes(rows, 64)  # split: packed rows of a prompt over several passes
    assert len(passes) > 1
    for p in passes:
        sub = [rows[i] for i in p.paths]
        with torch.no_grad():
            packed = packed_logprobs(model, sub, p.rows, 1.0, 0)
            padded = sequence_logprobs(model, sub, 1.0, 0)
        assert torch.allclose(packed, padded, rtol=1e-5, atol=1e-12)


def _step(model, trees, settings, ref, optimizer: str):  # type: ignore[no-untyped-def]
    """One `policy_update` from the model's state; returns (its parameters after, each flattened, and the stats)."""
    opt = (
        torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
        if optimizer == "adamw"
        else torch.optim.SGD(model.parameters(), lr=1.0)
    )
    stats = policy_update(model, opt, trees, settings, pad_id=0, rng=np.random.default_rng(3), ref_model=ref)
    return [p.detach().reshape(-1).clone() for p in model.parameters()], stats


def weight_error(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """max over weights of |a - b| / |b| (element-wise relative difference of two models' weights)."""
    return max(float(((x - y).abs() / y.abs().clamp(min=1e-12)).max()) for x, y in zip(a, b, strict=True))


def norm_error(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """max over parameter tensors of ||a - b|| / ||b||."""
    return max(float((x - y).norm() / y.norm().clamp(min=1e-30)) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("loss_agg", LOSS_AGGS)
@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
@pytest.mark.parametrize(
    ("micro_tokens", "minibatches", "rows"), [(0, 1, "count"), (96, 2, "count"), (48, 2, "drop")]
)
def test_one_optimizer_step_gives_the_padded_updates_weights(
    tiny_policy,
    float64_norms: None,
    loss_agg: str,
    kl_coef: float,
    micro_tokens: int,
    minibatches: int,
    rows: str,
) -> None:
    trees = replay_trees()
    ref = _double(tiny_policy.model)
    # a reference policy that differs from the trained one, so the KL term has a gradient
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        for p in ref.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    start = _double(tiny_policy.model)
    base = [p.detach().reshape(-1).clone() for p in start.parameters()]
    for optimizer in ("adamw", "sgd"):  # SGD at lr 1: the weights move by exactly minus the gradient
        moved, stats = {}, {}
        for packing in ("none", "tree"):
            settings = UpdateSpec(
                estimator="treerpo", minibatches=minibatches, loss_agg=loss_agg, kl_coef=kl_coef,
                micro_tokens=micro_tokens, zero_advantage_rows=rows, packing=packing, max_grad_norm=1e9,
                loss_scale_tokens=64 if loss_agg == "seq-mean-token-sum-norm" else 0,
            )  # fmt: skip
            moved[packing], stats[packing] = _step(copy.deepcopy(start), trees, settings, ref, optimizer)
        assert stats["tree"]["packed"] == 1.0 and stats["none"]["packed"] == 0.0
        assert stats["tree"]["forward_tokens"] < stats["none"]["forward_tokens"]
        assert max(float((x - y).abs().max()) for x, y in zip(moved["none"], base, strict=True)) > 1e-4
        assert weight_error(moved["tree"], moved["none"]) <= 1e-6, optimizer  # measured: at most 2.4e-8
        update = [x - y for x, y in zip(moved["none"], base, strict=True)]
        packed_update = [x - y for x, y in zip(moved["tree"], base, strict=True)]
        assert norm_error(packed_update, update) <= 1e-9, optimizer  # the step itself, measured: 2.5e-11
        for key, value in stats["none"].items():
            if key not in ("packed", "forward_tokens"):
                assert stats["tree"][key] == pytest.approx(value, rel=1e-6, abs=1e-12), key
        if kl_coef > 0:
            assert stats["tree"]["ref_kl"] > 0


def test_float32_models_agree_to_float32_rounding(tiny_policy) -> None:
    # the production case: a float32 model with its float32 norms; packed and padded sum the gradients of shared
    # tokens in different orders, so they agree to float32 rounding, not exactly
    trees = replay_trees(2)
    rows = path_rows(trees, UpdateSpec(estimator="treerpo"))
    p = plan_packed_passes(rows, 0)[0]
    sub = [rows[i] for i in p.paths]
    model = copy.deepcopy(tiny_policy.model)
    with torch.no_grad():
        packed = packed_logprobs(model, sub, p.rows, 1.0, 0)
        padded = sequence_logprobs(model, sub, 1.0, 0)
    per_path = (packed.sum(1) - padded.sum(1)).abs() / padded.sum(1).abs()
    assert float(per_path.max()) <= 1e-5
    assert float((packed - padded).abs().max()) <= 1e-4
    start = copy.deepcopy(tiny_policy.model)
    moved = {}
    for packing in ("none", "tree"):
        settings = UpdateSpec(
            estimator="treerpo", minibatches=2, micro_tokens=96, packing=packing, kl_coef=0.0
        )
        moved[packing], _ = _step(copy.deepcopy(start), trees, settings, None, "sgd")
    assert norm_error(moved["tree"], moved["none"]) <= 1e-5


def test_a_model_that_cannot_take_the_mask_gets_the_padded_update_with_one_log_line(
    tiny_policy, caplog: pytest.LogCaptureFixture
) -> None:
    trees = replay_trees()
    model = IgnoresMasks(_double(tiny_policy.model))
    padded_model = copy.deepcopy(model)
    settings = UpdateSpec(estimator="treerpo", minibatches=2, micro_tokens=96)
    with caplog.at_level(logging.WARNING, logger="trace_rl.train.packing"):
        w_tree, s_tree = _step(model, trees, settings, None, "sgd")
        _step(model, trees, settings, None, "sgd")  # a second update: no second log line
    lines = [r for r in caplog.records if "padded update" in r.getMessage()]
    assert len(lines) == 1 and "differ" in lines[0].getMessage()
    assert s_tree["packed"] == 0.0
    import dataclasses

    w_none, _ = _step(padded_model, trees, dataclasses.replace(settings, packing="none"), None, "sgd")
    assert all(torch.equal(x, y) for x, y in zip(w_tree, w_none, strict=True))


def test_the_eager_packed_update_runs_without_padding_and_falls_back_to_the_mask(
    tiny_policy, float64_norms: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The packed rows run end to end along each trie's chains (`tree_forward`), computing the rows' own tokens; a
    model whose attention function cannot be replaced keeps the dense mask, with one log line, for the same
    weights."""
    import trace_rl.train.packing as packing

    chained: list[int] = []
    real = packing.tree_forward
    monkeypatch.setattr(packing, "tree_forward", lambda m, rows: chained.append(len(rows)) or real(m, rows))
    trees = replay_trees()
    settings = UpdateSpec(estimator="treerpo", minibatches=1, micro_tokens=0)
    rows = [r for r in path_rows(trees, settings) if has_signal(r)]  # the rows the update forwards
    (plan,) = plan_packed_passes(rows, 0, CHAIN_ROW_TOKENS)
    w_chain, s_chain = _step(_double(tiny_policy.model), trees, settings, None, "sgd")
    assert chained == [len(plan.rows)] and s_chain["forward_tokens"] == plan.row_tokens < plan.tokens
    chained.clear()
    model = KeepsItsAttention(_double(tiny_policy.model))
    with caplog.at_level(logging.WARNING, logger="trace_rl.train.packing"):
        w_mask, s_mask = _step(model, trees, settings, None, "sgd")
        _step(model, trees, settings, None, "sgd")
    lines = [r.getMessage() for r in caplog.records if "keep the dense mask" in r.getMessage()]
    assert len(lines) == 1 and "differ" in lines[0] and chained == []
    assert s_mask["packed"] == 1.0 and s_mask["forward_tokens"] == plan.tokens
    assert weight_error(w_chain, w_mask) <= 1e-9


def test_packing_setting_is_validated() -> None:
    with pytest.raises(ValueError, match="packing: must be tree or none"):
        UpdateSpec(packing="trie")
    from trace_rl.train.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"optim\.packing"):
        load_config(preset="smoke", overrides=["optim.packing=padded"])
    assert load_config(preset="smoke").optim.packing == "tree"


@pytest.mark.parametrize("packing", ["tree", "none"])
def test_a_compiled_update_gives_the_eager_updates_weights(
    tiny_policy, packing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`optim.compile`: one optimizer step through torch.compile (trees with replays at depths 1-3, the KL term)
    moves the weights as the eager step does, to float32 rounding, and every forward ran through the wrapper."""
    import trace_rl.train.packing as tree_packing
    import trace_rl.train.update as update

    chained: list[bool] = []
    real_tree = tree_packing.tree_forward
    monkeypatch.setattr(tree_packing, "tree_forward", lambda m, r: chained.append(True) or real_tree(m, r))
    seen: list[str] = []
    real = update._micro_loss
    monkeypatch.setattr(
        update, "_micro_loss", lambda m, *a, **k: seen.append(type(m).__name__) or real(m, *a, **k)
    )
    trees = replay_trees(2)
    start = copy.deepcopy(tiny_policy.model)
    ref = copy.deepcopy(tiny_policy.model)
    moved, stats = {}, {}
    for on in (False, True):
        settings = UpdateSpec(
            estimator="treerpo", minibatches=2, micro_tokens=0, packing=packing, kl_coef=0.1, compile=on
        )
        model = copy.deepcopy(start)
        moved[on], stats[on] = _step(model, trees, settings, ref, "sgd")
        assert seen and set(seen) == {"OptimizedModule" if on else type(start).__name__}
        # eager packed rows run without padding; compiled ones keep the dense mask (one graph for all shapes)
        assert bool(chained) == (packing == "tree" and not on)
        seen.clear()
        chained.clear()
    assert norm_error(moved[True], moved[False]) <= 1e-5
    assert norm_error(moved[False], [p.detach().reshape(-1) for p in start.parameters()]) > 1e-4  # it trained
    assert stats[True]["loss"] == pytest.approx(stats[False]["loss"], rel=1e-5, abs=1e-7)
    assert stats[True]["packed"] == stats[False]["packed"] == float(packing == "tree")


def test_a_compile_failure_in_the_update_names_the_setting(tiny_policy, no_compiler: None) -> None:
    settings = UpdateSpec(estimator="treerpo", minibatches=1, micro_tokens=0, compile=True)
    with pytest.raises(RuntimeError, match=r"optim\.compile: .*RuntimeError: no C\+\+ compiler"):
        _step(copy.deepcopy(tiny_policy.model), replay_trees(2), settings, None, "sgd")
    off = UpdateSpec(estimator="treerpo", minibatches=1, micro_tokens=0)
    _step(
        copy.deepcopy(tiny_policy.model), replay_trees(2), off, None, "sgd"
    )  # off: the eager model, no wrapper
