"""The config reference (docs/config.md), generated from the config dataclasses so it cannot drift from them.

Every key's type and default come from the dataclass fields of `trace_rl.train.config_sections`; its meaning
from its field's metadata (TRACE's settings, `trace_rl.spec.setting`) or the ``Attributes:`` block of its
section's docstring (one ``name: text`` entry per field, continuation lines
indented further). A field without an entry, or an entry naming no field, raises `ConfigDocError`: a key cannot be added
without saying what it means. Regenerate the page with::

    python -m trace_rl.train.config_doc > docs/config.md

tests/unit/test_config_doc.py fails when the page differs from what this module writes.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from dataclasses import dataclass
from typing import Any

from trace_rl.spec import Range
from trace_rl.train.config import PRESET_DIR, preset_names
from trace_rl.train.config_ranges import RANGES, numeric_keys
from trace_rl.train.config_sections import TrainConfig


class ConfigDocError(ValueError):
    """A config key without a documented meaning, or a documented key that does not exist."""


@dataclass(frozen=True)
class KeyDoc:
    """One config key: ``section.name`` (or ``name`` at the top level), its type, default (JSON), meaning, and for
    a numeric key its accepted values (`trace_rl.train.config_ranges.RANGES`; "" for the others)."""

    key: str
    type: str
    default: str
    meaning: str
    range: str = ""


_ENTRY = re.compile(r"^    (\w+): (.*)$")


def attribute_docs(cls: type) -> dict[str, str]:
    """The ``Attributes:`` entries of a dataclass docstring: field name -> meaning (continuations joined)."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    out: dict[str, str] = {}
    inside, current = False, None
    for line in doc.splitlines():
        if line.strip() == "Attributes:":
            inside = True
            continue
        if not inside:
            continue
        if not line.strip() or not line.startswith("    "):
            inside, current = False, None
            continue
        match = _ENTRY.match(line)
        if match:
            current = match.group(1)
            out[current] = match.group(2).strip()
        elif current is not None and line.startswith("        "):
            out[current] += " " + line.strip()
    return out


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise ConfigDocError(f"{f.name}: a config key needs a default")


def section_docs(cls: type, prefix: str = "") -> list[KeyDoc]:
    """KeyDocs of every field of ``cls`` (sections first flattened into ``section.key`` rows).

    Raises:
        ConfigDocError: a field without a meaning in the docstring's Attributes block, or an entry naming no field.
    """
    documented = attribute_docs(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    meanings = {f.name: f.metadata["doc"] for f in fields if f.metadata.get("doc")} | documented
    plain = [f for f in fields if not _is_section(f)]
    missing = [f"{prefix}{f.name}" for f in plain if not meanings.get(f.name)]
    if missing:
        raise ConfigDocError(
            f"{cls.__name__}: no meaning for {', '.join(missing)}: add a 'name: meaning' line to its docstring's "
            "Attributes block"
        )
    stale = sorted(set(documented) - {f.name for f in plain})
    if stale:
        raise ConfigDocError(
            f"{cls.__name__}: its Attributes block names {', '.join(stale)}, which are not fields"
        )
    numeric = set(numeric_keys(cls, prefix))
    unranged = sorted(k for k in numeric if k not in RANGES)
    if unranged and cls.__module__ == TrainConfig.__module__:
        raise ConfigDocError(
            f"{cls.__name__}: no accepted range for {', '.join(unranged)}: add it to "
            "trace_rl.train.config_ranges.RANGES"
        )
    rows = [
        KeyDoc(
            f"{prefix}{f.name}",
            str(f.type),
            json.dumps(_default(f)),
            meanings[f.name],
            _range_cell(RANGES.get(f"{prefix}{f.name}")),
        )
        for f in plain
    ]
    for f in fields:
        if _is_section(f):
            rows.extend(section_docs(type(_default(f)), f"{prefix}{f.name}."))
    return rows


def _range_cell(r: Range | None) -> str:
    if r is None:
        return ""
    return f"{r.text()}; {r.note}" if r.note else r.text()


def _is_section(f: dataclasses.Field[Any]) -> bool:
    return f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _preset_summary(name: str) -> str:
    lines = (PRESET_DIR / f"{name}.yaml").read_text().splitlines()
    comment = []
    for line in lines:
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("# ").strip())
    return " ".join(comment)


def config_reference() -> str:
    """docs/config.md: how a config is built, the presets, then one table per section of every key."""
    rows = section_docs(TrainConfig)
    out = [
        "# Config reference",
        "",
        "<!-- generated by `python -m trace_rl.train.config_doc > docs/config.md` from src/trace_rl/train/config_sections.py;",
        "     do not edit by hand: tests/unit/test_config_doc.py fails when this page and the code differ -->",
        "",
        "A `trace-rl train` config is built in three layers, each validated by the same code",
        "(`trace_rl.train.config.load_config`): (1) the defaults below, (2) a preset (`--preset NAME`) or your own",
        "YAML file (`--config FILE`), (3) `--set section.key=value` overrides (`--method`, `--steps`, `--seed` are",
        "short for `--set method=...` and so on). A file or preset holds only the keys it changes, nested by section",
        "(`budget: {roots: 64}`). An unknown key, a wrong type or an impossible combination is one error line naming",
        "the key, e.g. `budget.rootz: unknown key (known: ...)`; `trace-rl train` exits with status 2. Every",
        "number must be finite and inside the range its row's *accepted* column gives (integers also whole and",
        "below 2**63 in size): `optim.max_grad_norm=0`, `optim.lr=inf` or `steps=nan` is such an error. The counts",
        "of work inside one step, one evaluation or the set-up have an upper bound, far above any kept run's value,",
        "so that a slip such as `predictor.updates=1e15` is such an error instead of a step that never ends:",
        "`predictor.updates`, `optim.epochs`, `optim.minibatches`, `env.max_turns`, `env.eval_tasks`,",
        "`env.eval_samples`, `env.train_limit` (the generated environments build every task at start-up),",
        "`backend.replicas` and `backend.kv_cache_gib`. `sampling.max_new_tokens` must lie below the policy's",
        "context (its `max_position_embeddings`, 4096 for `tiny`), checked as soon as the policy loads, before",
        "anything is generated. A run's length (`steps`, `policy.sft_steps`), periods (`eval_every`,",
        "`checkpoint_every`) and caps (`budget.max_rollouts`, `optim.micro_tokens`) have no upper bound: a long run",
        "logs every step and can be stopped and resumed. A setting",
        "that cannot take effect in its config is such an error too, never silently ignored: `backend.replicas`,",
        "`threads`, `dtype`, `nice` or `kv_cache_gib` unless trace-rl launches the vLLM servers, `backend.urls` or",
        "`max_in_flight` with the local engine, `predictor.updates`, `batch_size`, `lr`, `prefix_share` or",
        "`buffer_steps` with a convex predictor (one refit per step), `budget.max_num_gen_batches` with a method",
        "other than dapo, `predictor.history_window`/`history_decay` with a neural predictor,",
        "`budget.prefix_objective=contrast` with a method that does not use `allocate_prefixes` (only trace,",
        "trace_prefix_only and trace_fresh do), `budget.state_evidence` with any other method or with",
        "`predictor.name=ngram+minilm+group` (whose prior already reads those outcomes; `ngram+minilm+group-prior`",
        "is the one to pair with it), `budget.sibling_weight` with the paper's objective.",
        "",
        "## Presets",
        "",
        "Presets are plain YAML files shipped inside the package, in `src/trace_rl/train/presets/` (installed: the",
        "folder `python -c 'import trace_rl.train.config as c; print(c.PRESET_DIR)'` prints). To start from one,",
        "copy it and pass the copy: `cp $(python -c 'import trace_rl.train.config as c; print(c.PRESET_DIR)')/demo.yaml",
        "my.yaml`, edit, `trace-rl train --config my.yaml --out runs/mine`. The copy loads through exactly the same",
        'parser and checks as `--preset demo` and gives the same config (its `preset` key reads "custom").',
        "",
        "| preset | what it is |",
        "|---|---|",
    ]
    out += [f"| `{name}` | {_cell(_preset_summary(name))} |" for name in preset_names()]
    sections: dict[str, list[KeyDoc]] = {}
    for row in rows:
        sections.setdefault(row.key.split(".")[0] if "." in row.key else "", []).append(row)
    for section, keys in sections.items():
        title = f"`{section}`" if section else "Top level"
        doc = inspect.cleandoc(type(getattr(TrainConfig(), section)).__doc__ or "") if section else ""
        out += ["", f"## {title}", ""]
        if doc:
            out += [doc.splitlines()[0], ""]
        out += ["| key | type | default | accepted | meaning |", "|---|---|---|---|---|"]
        out += [
            f"| `{k.key}` | `{_cell(k.type)}` | `{_cell(k.default)}` | {_cell(k.range)} | {_cell(k.meaning)} |"
            for k in keys
        ]
    return "\n".join(out) + "\n"


def main() -> None:
    print(config_reference(), end="")


if __name__ == "__main__":
    main()
