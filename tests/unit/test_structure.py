"""The package's structure rules (issue 41): one job per file, no import circles.

- No module under ``src/trace_rl`` is longer than ``MAX_LINES`` lines.
- Every module opens with a docstring (its one job).
- The import graph of ``trace_rl`` has no cycle. The graph is grimp's: imports at module level and inside
  functions, ``if TYPE_CHECKING:`` blocks excluded (they never run). A cycle is a strongly connected component of
  more than one module (scipy's ``connected_components(connection="strong")``) or a module importing itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

SRC = Path(__file__).resolve().parents[2] / "src" / "trace_rl"
MAX_LINES = 600


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_module_over_the_line_limit() -> None:
    long = {
        str(p.relative_to(SRC)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split along their seams): {long}"


def test_every_module_has_a_docstring() -> None:
    missing = [str(p.relative_to(SRC)) for p in _modules() if not ast.get_docstring(ast.parse(p.read_text()))]
    assert not missing, f"modules without a docstring saying their one job: {missing}"


def import_cycles(package: str = "trace_rl") -> list[list[str]]:
    """The cycles of ``package``'s import graph, as sorted lists of module names (one per strongly connected
    component of two or more modules, plus each module that imports itself). An import of a module also counts
    as an import of each package above it that the importer is not inside (its ``__init__`` runs first)."""
    graph = grimp.build_graph(package, exclude_type_checking_imports=True, cache_dir=None)  # no stale cache
    names = sorted(graph.modules)
    index = {name: i for i, name in enumerate(names)}
    rows, cols, self_imports = [], [], []
    for name in names:
        for imported in graph.find_modules_directly_imported_by(name):
            if imported not in index:
                continue
            if imported == name:
                self_imports.append([name])
            # importing a.b.c first runs the package a.b's __init__ (grimp records no such edge); the importer's
            # own packages are already being initialised, so only the others count
            own = {name.rsplit(".", k)[0] for k in range(1, name.count(".") + 1)}
            parents = {imported.rsplit(".", k)[0] for k in range(1, imported.count(".") + 1)}
            for target in [imported, *sorted(parents - own - {name})]:
                if target in index:
                    rows.append(index[name])
                    cols.append(index[target])
    adjacency = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(names), len(names)))
    _, labels = connected_components(adjacency, directed=True, connection="strong")
    components: dict[int, list[str]] = {}
    for name, label in zip(names, labels, strict=True):
        components.setdefault(int(label), []).append(name)
    return [c for c in components.values() if len(c) > 1] + self_imports


def test_import_cycle_finder_finds_a_planted_cycle(tmp_path: Path, monkeypatch) -> None:
    pkg = tmp_path / "cyclepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""planted."""\n')
    (pkg / "a.py").write_text('"""a."""\n\n\ndef f():\n    from cyclepkg import b  # noqa: F401\n')
    (pkg / "b.py").write_text('"""b."""\nimport cyclepkg.a  # noqa: F401\n')
    (pkg / "c.py").write_text(
        '"""c."""\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import cyclepkg.d  # noqa: F401\n'
    )
    (pkg / "d.py").write_text('"""d."""\nimport cyclepkg.c  # noqa: F401\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    cycles = import_cycles("cyclepkg")
    assert sorted(map(sorted, cycles)) == [
        ["cyclepkg.a", "cyclepkg.b"]
    ]  # function-level counts, TYPE_CHECKING not


def test_import_cycle_finder_follows_package_inits(tmp_path: Path, monkeypatch) -> None:
    pkg = tmp_path / "initpkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""planted."""\n')
    (pkg / "sub" / "__init__.py").write_text('"""sub."""\nimport initpkg.sub.s  # noqa: F401\n')
    (pkg / "sub" / "s.py").write_text('"""s."""\nimport initpkg.q  # noqa: F401\n')
    (pkg / "sub" / "r.py").write_text('"""r."""\n')
    (pkg / "q.py").write_text('"""q."""\nimport initpkg.sub.r  # noqa: F401\n')  # runs sub/__init__ first
    monkeypatch.syspath_prepend(str(tmp_path))
    cycles = import_cycles("initpkg")
    assert [c for c in cycles if "initpkg.q" in c] == [["initpkg.q", "initpkg.sub", "initpkg.sub.s"]]


def test_no_import_cycles() -> None:
    cycles = import_cycles()
    assert not cycles, "import cycles (move what both sides need into a module both import): " + "; ".join(
        " <-> ".join(c) for c in cycles
    )
