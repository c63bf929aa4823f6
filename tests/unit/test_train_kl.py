"""`optim.kl_coef` takes effect in `trace-rl train` (issue 25): the trainer keeps a frozen reference policy (the
RL start point), its k3 KL changes the update, and the step record logs it as ``update_ref_kl``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.unit.test_policy_update import build_tree  # noqa: E402
from trace_rl.train.config import load_config  # noqa: E402
from trace_rl.train.run import Trainer  # noqa: E402


def trainer(folder, kl: float) -> Trainer:  # type: ignore[no-untyped-def]
    # 3 epochs: after the first optimizer step the policy differs from the reference, so the KL term pulls
    overrides = [f"optim.kl_coef={kl}", "optim.epochs=3", "optim.lr=0.01", "eval_every=0"]
    t = Trainer(load_config(preset="smoke", overrides=overrides), folder, log=lambda s: None)
    t.setup()
    return t


def test_kl_coef_changes_the_update_and_is_logged(tmp_path) -> None:  # type: ignore[no-untyped-def]
    moves = {}
    for kl in (0.0, 1.0):
        t = trainer(tmp_path / f"kl{kl}", kl)
        assert (t.ref_model is not None) == (kl > 0)
        before = [p.detach().clone() for p in t.policy.model.parameters()]
        stats = t.parts.update_policy([build_tree(t.policy.model)])
        after = list(t.policy.model.parameters())
        moves[kl] = torch.cat([(a.detach() - b).flatten() for a, b in zip(after, before, strict=True)])
        assert ("ref_kl" in stats) == (kl > 0)  # the step record carries it as update_ref_kl
        if kl > 0:
            assert stats["ref_kl"] > 0
            ref = dict(t.ref_model.named_parameters())  # the reference stayed where RL started
            named = [n for n, _ in t.policy.model.named_parameters()]
            assert all(torch.equal(ref[n], b) for n, b in zip(named, before, strict=True))
    assert moves[0.0].abs().sum() > 0
    assert (moves[1.0] - moves[0.0]).abs().max() > 1e-6
