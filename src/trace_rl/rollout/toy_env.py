"""A small arithmetic tool-use environment that follows the Env protocol exactly (see trace_rl.envs).

It exists so that the rollout code, its tests and its benchmark run on a real multi-turn tool workload before
(and independently of) the envs package: the agent asks a `python` tool to evaluate an expression, reads the
result, then answers. The tool is a safe `ast` evaluator of integer arithmetic (no code is executed).
Reward: 1 when `<answer>` equals the exact value, else 0; the episode ends on an answer or after max_turns.
"""

from __future__ import annotations

import ast
import copy
import json
import operator
import random
import re
from dataclasses import dataclass, field

from trace_rl.types import Task

ENV_NAME = "toy_arith"
PYTHON_TOOL: dict[str, object] = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Run Python code and return what it prints.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python source"}},
            "required": ["code"],
        },
    },
}
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
_TOOL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.S)


@dataclass(frozen=True)
class StepResult:
    """Result of one toy-env step: observation text, reward in {0, 1}, done flag, info dict."""

    observation: str
    reward: float
    done: bool
    info: dict[str, object] = field(default_factory=dict)


def safe_eval(expr: str) -> int:
    """Value of an integer expression with + - * and parentheses. Raises ValueError on anything else."""
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"syntax error: {exc.msg}") from exc

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = ev(node.left), ev(node.right)
            if abs(left) > 10**12 or abs(right) > 10**12:
                raise ValueError("number too large")
            return int(_OPS[type(node.op)](left, right))
        raise ValueError(f"unsupported expression element {type(node).__name__}")

    return ev(tree)


def run_code(code: str) -> str:
    """The `python` tool: `print(<expr>)` or a bare expression; returns the printed text or an error line."""
    code = code.strip()
    m = re.fullmatch(r"print\((.*)\)", code, re.S)
    try:
        return str(safe_eval(m.group(1) if m else code))
    except ValueError as exc:
        return f"Error: {exc}"


def load_tasks(
    split: str = "train", limit: int = 64, seed: int = 0, *, max_terms: int = 4, with_schema: bool = False
) -> list[Task]:
    """Deterministic tasks: expressions of 2..max_terms integers (1-2 digits) joined by + - *.

    The prompt names the python tool. `with_schema=True` also attaches its JSON schema (rendered in the
    system turn by the chat template); it is off by default because the schema triples the prompt length,
    which dominates the cost of training a tiny policy on CPU.
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    rng = random.Random(f"{split}:{seed}")
    tasks = []
    for i in range(limit):
        n = rng.randint(2, max_terms)
        terms = [str(rng.randint(1, 99 if rng.random() < 0.5 else 9)) for _ in range(n)]
        expr = terms[0] + "".join(f" {rng.choice('+-*')} {t}" for t in terms[1:])
        tasks.append(
            Task(
                id=f"{split}-{seed}-{i}",
                env=ENV_NAME,
                prompt=f"Compute {expr} with the python tool, then answer.",
                answer=str(safe_eval(expr)),
                tools=(PYTHON_TOOL,) if with_schema else (),
                metadata={"expression": expr},
            )
        )
    return tasks


def gold_trajectory(task: Task) -> list[str]:
    """The reference assistant turns: one tool call printing the expression, then the answer."""
    call = {"name": "python", "arguments": {"code": f"print({task.metadata['expression']})"}}
    return [f"<tool_call>{json.dumps(call)}</tool_call>", f"<answer>{task.answer}</answer>"]


class ArithmeticToolEnv:
    """Env protocol: reset(task) -> prompt; step(text) -> StepResult; snapshot()/restore(state)."""

    def __init__(self, max_turns: int = 4):
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.max_turns = max_turns
        self._state: dict[str, object] = {}

    def reset(self, task: Task) -> str:
        self._state = {"task": task, "turn": 0, "tool_outputs": [], "done": False}
        return task.prompt

    def step(self, assistant_text: str) -> StepResult:
        st = self._state
        if not st or st["done"]:
            raise ValueError("step() called before reset() or after the episode ended")
        task = st["task"]
        assert isinstance(task, Task)
        turn = int(st["turn"]) + 1  # type: ignore[call-overload]
        st["turn"] = turn
        answer = _ANSWER_RE.search(assistant_text)
        if answer is not None:
            st["done"] = True
            correct = answer.group(1).strip() == task.answer
            return StepResult("", float(correct), True, {"answer": answer.group(1).strip()})
        call = _TOOL_RE.search(assistant_text)
        info: dict[str, object]
        if call is None:
            obs, info = "Error: no <tool_call> or <answer> found.", {"error": "format"}
        else:
            try:
                parsed = json.loads(call.group(1))
                if not isinstance(parsed, dict) or parsed.get("name") != "python":
                    raise ValueError("unknown tool")
                args = parsed.get("arguments")
                if not isinstance(args, dict) or not isinstance(args.get("code"), str):
                    raise ValueError("missing arguments.code")
                obs, info = run_code(args["code"]), {"tool": "python"}
            except (ValueError, json.JSONDecodeError) as exc:
                obs, info = f"Error: bad tool call ({exc}).", {"error": "tool_call"}
        outputs = st["tool_outputs"]
        assert isinstance(outputs, list)
        outputs.append(obs)
        if turn >= self.max_turns:
            st["done"] = True
            return StepResult(obs, 0.0, True, {**info, "max_turns": True})
        return StepResult(obs, 0.0, False, info)

    def snapshot(self) -> object:
        return copy.deepcopy(self._state)

    def restore(self, state: object) -> None:
        if not isinstance(state, dict):
            raise ValueError("restore() expects a state returned by snapshot()")
        self._state = copy.deepcopy(state)


class ParityToolEnv(ArithmeticToolEnv):
    """The arithmetic tool env with a reward a random policy earns about half the time, for checks of the
    policy-gradient path (scripts/device_check.py).

    A random-init policy never writes the exact answer, so under `ArithmeticToolEnv` every group of rollouts
    agrees (all 0), every advantage is 0 and the policy update has nothing to train on. Here the episode's
    last assistant turn is scored instead: reward 1 when its text has an even number of characters, else 0
    (a correct ``<answer>`` also scores 1). Turns, tool calls, the turn limit, observations and
    snapshot/restore are those of `ArithmeticToolEnv`, so replays from turn prefixes behave the same; only the
    reward of the final turn differs. For a policy whose turn lengths are spread over many characters the
    reward is a fair coin, so a group of m rollouts is mixed with probability about 1 - 2 * 0.5**m.
    Tasks: this module's `load_tasks` (named as ``trace_rl.rollout.toy_env:ParityToolEnv``).
    """

    def step(self, assistant_text: str) -> StepResult:
        result = super().step(assistant_text)
        if not result.done or result.reward == 1.0:
            return result
        even = len(assistant_text) % 2 == 0
        return StepResult(result.observation, float(even), True, {**result.info, "parity_reward": even})


def make_env(name: str = ENV_NAME, **kwargs: object) -> ArithmeticToolEnv:
    """A fresh toy arithmetic env; ValueError for any other name."""
    if name != ENV_NAME:
        raise ValueError(f"unknown environment {name!r}")
    return ArithmeticToolEnv(**kwargs)  # type: ignore[arg-type]
