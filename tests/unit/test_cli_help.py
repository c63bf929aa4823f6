"""Every `trace-rl` command and subcommand renders its --help (argparse formats help strings with %)."""

from __future__ import annotations

import argparse
import re

from trace_rl.cli.main import build_parser


def _parsers(
    parser: argparse.ArgumentParser, path: str = "trace-rl"
) -> list[tuple[str, argparse.ArgumentParser]]:
    out = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _parsers(sub, f"{path} {name}")
    return out


def test_every_command_help_renders() -> None:
    parsers = _parsers(build_parser())
    names = {p for p, _ in parsers}
    assert {"trace-rl train", "trace-rl compare", "trace-rl report", "trace-rl lab claims"} <= names
    for path, parser in parsers:
        text = parser.format_help()  # raises on a stray % in a help string
        assert "usage:" in text, path


def test_train_and_compare_help_name_every_method() -> None:
    """The method lists in --help come from the registry, so a new method cannot be left out of them."""
    from trace_rl.allocation import METHODS

    parsers = dict(_parsers(build_parser()))
    for path in ("trace-rl train", "trace-rl compare"):
        words = set(re.findall(r"[a-z_0-9]+", parsers[path].format_help()))
        missing = [m for m in METHODS if m not in words]
        assert not missing, f"{path} --help omits {missing}"
