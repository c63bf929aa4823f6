"""docs/config.md is generated from the config dataclasses; presets are copyable YAML files loaded like --config."""

from __future__ import annotations

import dataclasses
import shutil
import tomllib
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

import pytest

from trace_rl.train.config import PRESET_DIR, TrainConfig, load_config, preset_names
from trace_rl.train.config_doc import ConfigDocError, config_reference, section_docs

ROOT = Path(__file__).resolve().parents[2]


def test_docs_config_md_is_what_the_code_generates() -> None:
    written = (ROOT / "docs" / "config.md").read_text()
    assert written == config_reference(), "regenerate: python -m trace_rl.train.config_doc > docs/config.md"


def test_every_key_has_a_default_and_a_meaning() -> None:
    def keys(data: dict, prefix: str = "") -> set[str]:
        out: set[str] = set()
        for k, v in data.items():
            section = isinstance(v, dict) and k in {f.name for f in dataclasses.fields(TrainConfig)}
            out |= keys(v, f"{k}.") if section else {f"{prefix}{k}"}
        return out

    rows = {row.key: row for row in section_docs(TrainConfig)}
    assert set(rows) == keys(TrainConfig().to_dict())
    assert all(row.meaning and row.default for row in rows.values())
    assert rows["budget.roots"].default == "32" and rows["env.train_limit"].default == "2000"


def test_a_key_without_a_meaning_or_a_meaning_without_a_key_fails() -> None:
    @dataclass(frozen=True)
    class Section:
        """A section.

        Attributes:
            alpha: documented.
        """

        alpha: int = 1
        beta: int = 2

    with pytest.raises(ConfigDocError, match=r"no meaning for sec\.beta"):
        section_docs(Section, "sec.")

    @dataclass(frozen=True)
    class Stale:
        """A section.

        Attributes:
            alpha: documented,
                over two lines.
            gamma: not a field.
        """

        alpha: int = 1
        extra: dict = field(default_factory=dict)

    with pytest.raises(ConfigDocError, match="no meaning for extra"):
        section_docs(Stale)
    Stale.__doc__ = Stale.__doc__.replace("gamma: not a field.", "extra: a mapping.")  # type: ignore[union-attr]
    rows = section_docs(Stale)
    assert [(r.key, r.default, r.meaning) for r in rows] == [
        ("alpha", "1", "documented, over two lines."),
        ("extra", "{}", "a mapping."),
    ]


@pytest.mark.parametrize("name", preset_names())
def test_a_copied_preset_loads_like_the_preset(name: str, tmp_path: Path) -> None:
    copy = tmp_path / "mine.yaml"
    shutil.copy(PRESET_DIR / f"{name}.yaml", copy)
    from_file = load_config(file=copy, overrides=["steps=3"])
    from_preset = load_config(preset=name, overrides=["steps=3"])
    assert from_file.preset == "custom" and dataclasses.replace(from_file, preset=name) == from_preset


def test_presets_are_installed_with_the_package() -> None:
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "trace_rl"
    ]
    src = ROOT / "src" / "trace_rl"
    for path in PRESET_DIR.glob("*.yaml"):
        assert any(fnmatch(str(path.relative_to(src)), g) for g in globs), path
