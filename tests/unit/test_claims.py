"""README.md's claims table and docs/results.md hold exactly what `scripts/claims.py` recomputes from the run logs
kept in results/ (issue 60: every reported number recomputes from what is kept), and no result is typed by hand
outside the generated blocks."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).parents[2]
_spec = importlib.util.spec_from_file_location("claims_script", ROOT / "scripts" / "claims.py")
assert _spec is not None and _spec.loader is not None
claims = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(claims)

# a result typed by hand: a signed decimal (+0.020) or a rate written to two places or more (0.392)
RESULT = re.compile(r"(?<![\w.])(?:[+-]\d+\.\d+|0\.\d{2,})(?![\w.])")
CODE = re.compile(r"```.*?```|`[^`]*`", re.S)  # commands and their arguments are not results


def test_pages_hold_what_claims_py_recomputes() -> None:
    assert claims.differences() == [], "run: python scripts/claims.py --write"


def test_every_block_has_rows_and_an_interval_where_seeds_allow() -> None:
    for path, expected in claims.blocks().items():
        for name, text in expected.items():
            assert text.count("\n") >= 2, (path, name)  # header, rule, at least one row
    for claim in claims.CLAIMS:  # every claim is paired over two seeds or more: an interval, not "(one seed)"
        assert re.fullmatch(r"[+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]", claims.number(claim.pair)), (
            claim
        )


def test_no_result_typed_outside_the_generated_blocks() -> None:
    for path in claims.FILES:
        hand = CODE.sub("", claims.outside((ROOT / path).read_text()))
        assert RESULT.findall(hand) == [], path


def test_an_edited_number_is_caught(tmp_path: Path) -> None:
    """The check fails when one digit of one number in a generated block is changed (in a copy)."""
    for path in claims.FILES:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    assert claims.differences(tmp_path) == []
    readme = (tmp_path / "README.md").read_text()
    edited = readme.replace("**+0.020 [+0.007, +0.033]**", "**+0.021 [+0.007, +0.033]**", 1)
    assert edited != readme
    (tmp_path / "README.md").write_text(edited)
    assert claims.differences(tmp_path) == [
        "README.md: block claims differs from what scripts/claims.py recomputes"
    ]
    page = (tmp_path / "docs/results.md").read_text()
    (tmp_path / "docs/results.md").write_text(page.replace("<!-- /claims:c58 -->", "<!-- /claims:c5 -->", 1))
    assert "docs/results.md: no block <!-- claims:c58 -->" in claims.differences(tmp_path)
