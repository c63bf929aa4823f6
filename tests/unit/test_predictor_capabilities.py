"""Explicit predictor capabilities (issue 60, item 3): each predictor declares what it can do beyond
`SuccessPredictor`, the declaration is checked when the predictor is built or handed to the trainer, and no code
in src/ probes a predictor with ``getattr`` / ``hasattr``."""

from __future__ import annotations

import ast
import asyncio
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trace_rl.allocation import get_method
from trace_rl.predictor import NO_CAPABILITIES, Capability, OnlineTrainer, build_predictor, check_capabilities
from trace_rl.predictor.capabilities import (
    PROTOCOLS,
    as_group_aware,
    as_history_posterior,
    as_preparable,
    as_state_aware,
    example_weighting,
    protocol_members,
    refits,
)
from trace_rl.predictor.names import CONVEX_NAMES
from trace_rl.train.prefixes import replay_allocator

SRC = Path(__file__).resolve().parents[2] / "src" / "trace_rl"
P, G, S, PREP, R = (
    Capability.POSTERIOR,
    Capability.GROUP,
    Capability.STATE,
    Capability.PREPARE,
    Capability.REFIT,
)
#: What each built predictor declares (the table of docs/predictor.md and trace_rl.predictor.capabilities).
DECLARED = {
    "ngram": {P, PREP, R},
    "minilm-head": {P, PREP, R},
    "ngram+minilm": {P, PREP, R},
    "state-head": {P, PREP, R, S},
    "ngram+minilm+state": {P, PREP, R, S},
    "ngram+minilm+group": {P, PREP, R, G},
    "ngram+minilm+group-prior": {P, PREP, R, G},
    "tiny": set(),
}


# ------------------------------------------------------------------------------------ declarations
def test_every_capability_has_a_protocol_with_members() -> None:
    assert set(PROTOCOLS) == set(Capability)
    assert protocol_members(PROTOCOLS[S]) == ("attach_state", "register_contexts")
    assert protocol_members(PROTOCOLS[G]) == ("reads_state_outcomes", "register_group")
    assert protocol_members(PROTOCOLS[P]) == ("posterior", "prior_strength")
    assert protocol_members(PROTOCOLS[PREP]) == ("prepare",)
    assert protocol_members(PROTOCOLS[R]) == ("history",)


def test_each_built_predictor_declares_its_capabilities() -> None:
    assert set(DECLARED) >= set(CONVEX_NAMES)
    for name, expected in DECLARED.items():
        pred = build_predictor(name, seed=0)
        assert pred.capabilities == frozenset(expected), name
        check_capabilities(pred)
        assert (as_state_aware(pred) is not None) == (S in expected) == ("state" in name)
        assert (as_group_aware(pred) is not None) == (G in expected) == ("group" in name)
        assert (as_history_posterior(pred) is not None) == (P in expected)
        assert (as_preparable(pred) is not None) == (PREP in expected)
        assert refits(pred) == (R in expected)
        assert example_weighting(pred) == ("leaves" if R in expected else "uniform")
        if name in CONVEX_NAMES:  # the old flags, now read from the declaration
            assert pred.uses_state == (S in expected) and pred.uses_group == (G in expected)


class Liar:
    """Claims the posterior capability without ``prior_strength``."""

    name, prior, max_chars, is_warm = "liar", 0.5, 2048, True
    capabilities = frozenset({Capability.POSTERIOR})

    def predict(self, texts: list[str]) -> np.ndarray:
        return np.full(len(texts), 0.5)

    def posterior(self, texts: list[str], successes: Any, trials: Any) -> np.ndarray:
        return np.full(len(texts), 0.5)


class Undeclared:
    name, prior, max_chars, is_warm = "undeclared", 0.5, 2048, True

    def predict(self, texts: list[str]) -> np.ndarray:
        return np.full(len(texts), 0.5)

    def posterior(self, texts: list[str], successes: Any, trials: Any) -> np.ndarray:
        raise AssertionError("never called: the predictor does not declare it")


def test_a_claimed_capability_without_its_members_is_refused() -> None:
    with pytest.raises(TypeError, match=r"declares the 'posterior' capability but lacks prior_strength"):
        check_capabilities(Liar())
    with pytest.raises(TypeError, match="declares no capabilities"):
        check_capabilities(Undeclared())
    bad = Liar()
    bad.capabilities = {"posterior"}  # type: ignore[assignment]
    with pytest.raises(TypeError, match="frozenset of Capability"):
        check_capabilities(bad)
    group = Liar()
    group.capabilities = frozenset({Capability.GROUP})
    with pytest.raises(TypeError, match="lacks reads_state_outcomes, register_group"):
        check_capabilities(group)


def test_the_trainer_refuses_such_a_predictor_when_handed_it() -> None:
    with pytest.raises(TypeError, match="lacks prior_strength"):
        OnlineTrainer(Liar())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="lacks prior_strength"):
        replay_allocator(
            get_method("trace"), Liar(), replay_cost=0.5, rng_of=lambda t: np.random.default_rng(0)
        )
    with pytest.raises(TypeError, match="declares no capabilities"):
        OnlineTrainer(Undeclared())  # type: ignore[arg-type]


def test_an_undeclared_member_is_never_called() -> None:
    """A predictor that has ``posterior`` but does not declare it is valued like any plain predictor (the prior
    with 4 pseudo-trials): callers follow the declaration, not the members they find."""
    from trace_rl.train.prefixes import anchor_values
    from trace_rl.tree import RolloutTree
    from trace_rl.types import Anchor

    nan = float("nan")
    tree = RolloutTree.from_parents([-1, 0, 1, 0, 3], [nan, nan, 1.0, nan, 0.0])
    pred = Undeclared()
    pred.capabilities = NO_CAPABILITIES  # type: ignore[attr-defined]
    out = anchor_values(pred, ["p"], np.array([0.5]), tree, [Anchor(0, 0, 1.0)])
    np.testing.assert_allclose(out, [(4 * 0.5 + 1) / (4 + 2)])


# ------------------------------------------------------------------------------------ the verl actor
def test_the_verl_actor_ships_its_declaration_and_the_remote_follows_it() -> None:
    from trace_rl.integrations.verl.predictor import PredictorActor, RemotePredictor

    convex = PredictorActor("ngram")
    profile = convex.profile()
    assert profile["capabilities"] == ["posterior", "prepare", "refit"] and profile["max_chars"] == 1024
    remote = RemotePredictor(handle=None, profile=profile)
    assert remote.capabilities == frozenset({P}) and remote.example_weighting == "leaves"
    assert as_history_posterior(remote) is remote and remote.name == "ngram"
    texts = ["Calculate 1 + 2 ="]
    assert convex.prior_strength(texts) is not None and convex.posterior(texts, [1.0], [2.0]) is not None

    torch_actor = PredictorActor("tiny")
    profile = torch_actor.profile()
    assert profile["capabilities"] == [] and profile["max_chars"] == 508
    remote = RemotePredictor(handle=None, profile=profile)
    assert remote.example_weighting == "uniform" and as_history_posterior(remote) is None
    assert torch_actor.prior_strength(texts) is None and torch_actor.posterior(texts, [1.0], [2.0]) is None

    with pytest.raises(ValueError, match="declares group: the verl adapter cannot hand it over"):
        RemotePredictor(handle=None, profile={**profile, "capabilities": ["group", "posterior"]})


def test_the_remote_posterior_is_awaited_through_the_declaration() -> None:
    from trace_rl.integrations.verl.predictor import PredictorActor, RemotePredictor
    from trace_rl.train.prefixes import _anchor_values_async
    from trace_rl.tree import RolloutTree
    from trace_rl.types import Anchor

    actor = PredictorActor("ngram")

    class Call:
        def __init__(self, fn: Any) -> None:
            self.fn = fn

        async def remote(self, *args: Any) -> Any:
            return self.fn(*args)

    class Handle:
        posterior = Call(actor.posterior)
        prior_strength = Call(actor.prior_strength)

    remote = RemotePredictor(handle=Handle(), profile=actor.profile())
    nan = float("nan")
    tree = RolloutTree.from_parents([-1, 0, 1, 0, 3], [nan, nan, 1.0, nan, 0.0])
    texts = ["Calculate 1 + 2 ="]
    out = asyncio.run(_anchor_values_async(remote, texts, np.array([0.5]), tree, [Anchor(0, 0, 1.0)]))
    np.testing.assert_allclose(out, actor.predictor.posterior(texts, [1.0], [2.0]))


# ------------------------------------------------------------------------------------ no probing in src/
#: Names of the classes and protocols a predictor is annotated with.
PREDICTOR_TYPES = ("Predictor", "StateAware", "GroupAware", "HistoryPosterior", "Preparable", "Refitting")
#: Roots of attribute chains that hold configs: ``cfg.predictor`` is the config's predictor section, not one.
CONFIG_ROOTS = ("cfg", "config", "defaults", "settings")
PROBES = ("getattr", "hasattr", "getattr_static")


def _chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` -> ["a", "b", "c"]; None for anything else (a call, a subscript...)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _annotated_predictor(annotation: ast.expr | None) -> bool:
    return annotation is not None and any(t in ast.unparse(annotation) for t in PREDICTOR_TYPES)


class _ProbeFinder(ast.NodeVisitor):
    """Finds probes (``getattr``/``hasattr``/``inspect.getattr_static`` calls) whose object is a predictor: an
    expression named like one (``predictor``, ``self.predictor``, ``parts.predictor``, ``self._predictor``, outside
    config sections), a parameter annotated with a predictor type, a name or ``self`` attribute assigned from such
    an expression in the same class or function, or ``self`` in a class named ``...Predictor``."""

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []
        self.names: list[set[str]] = [set()]  # predictor-ish dotted names per scope
        self.klass: list[str] = []

    def predictorish(self, node: ast.expr) -> bool:
        chain = _chain(node)
        if chain is None:
            return False
        dotted = ".".join(chain)
        if any(dotted in scope for scope in self.names):
            return True
        if chain == ["self"] and self.klass and self.klass[-1].endswith("Predictor"):
            return True
        if chain[0] in CONFIG_ROOTS or "cfg" in chain[:-1]:
            return False
        return "predictor" in chain[-1].lower()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.klass.append(node.name)
        self.names.append(set())
        # attributes assigned from a predictor anywhere in the class count in all of its methods
        for sub in ast.walk(node):
            if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                self._params(sub, self.names[-1])
        for sub in ast.walk(node):
            self._assign(sub, self.names[-1])
        self.generic_visit(node)
        self.names.pop()
        self.klass.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        scope: set[str] = set()
        self.names.append(scope)
        self._params(node, scope)
        for sub in ast.walk(node):
            self._assign(sub, scope)
        self.generic_visit(node)
        self.names.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _params(self, node: ast.FunctionDef | ast.AsyncFunctionDef, scope: set[str]) -> None:
        args = node.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if _annotated_predictor(a.annotation):
                scope.add(a.arg)

    def _assign(self, node: ast.AST, scope: set[str]) -> None:
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            annotated = isinstance(node, ast.AnnAssign) and _annotated_predictor(node.annotation)
            if annotated or self.predictorish(node.value):
                for t in targets:
                    if (chain := _chain(t)) is not None:
                        scope.add(".".join(chain))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in PROBES and node.args and self.predictorish(node.args[0]):
            self.found.append((node.lineno, ast.unparse(node)))
        self.generic_visit(node)


def predictor_probes(source: str) -> list[tuple[int, str]]:
    """(line, call) of every probe of a predictor in ``source`` (`_ProbeFinder`)."""
    finder = _ProbeFinder()
    finder.visit(ast.parse(source))
    return finder.found


def test_no_code_in_src_probes_a_predictor() -> None:
    found = {
        f"{p.relative_to(SRC)}:{line}": call
        for p in sorted(SRC.rglob("*.py"))
        for line, call in predictor_probes(p.read_text())
    }
    assert not found, f"dispatch on the declared capabilities (trace_rl.predictor.capabilities): {found}"


@pytest.mark.parametrize(
    "source",
    [
        'x = getattr(predictor, "max_chars", 2048)',
        'def f(parts):\n    return getattr(parts.predictor, "uses_state", False)',
        'class T:\n    def f(self):\n        return getattr(self.predictor, "prepare", None)',
        'class T:\n    def f(self):\n        p = self.predictor\n        return getattr(p, "is_warm", False)',
        'def f(model: SuccessPredictor):\n    return hasattr(model, "posterior")',
        "class W:\n    def __init__(self, m: SuccessPredictor):\n        self.m = m\n"
        '    def g(self):\n        return getattr(self.m, "posterior", None)',
        'class ConvexSuccessPredictor:\n    def f(self):\n        return getattr(self, "uses_group", False)',
        'async def f(self):\n    return inspect.getattr_static(self._predictor, "posterior")',
        'def f(trainer):\n    if (p := trainer.predictor) is not None:\n        return getattr(p, "name", "?")',
    ],
)
def test_the_scan_finds_a_probe(source: str) -> None:
    assert len(predictor_probes(textwrap.dedent(source))) == 1, source


@pytest.mark.parametrize(
    "source",
    [
        "v = getattr(cfg.predictor, key)",  # the config's predictor section
        'v = getattr(self.cfg.predictor, "name")',
        'v = getattr(turn, "text", None)',
        'v = getattr(model.config, "_attn_implementation", None)',
        "v = predictor.max_chars",
    ],
)
def test_the_scan_leaves_other_objects_alone(source: str) -> None:
    assert predictor_probes(source) == []
