"""Debian's chromium driven by Playwright: the one place the browser tests (and docs screenshots) launch it.

Playwright's own browser download cannot work on these machines, so it is pointed at the system executable,
which `make install` installs with apt-get where it can (as bubblewrap). Screenshots for docs/:

    .venv/bin/python -m tests.browser.chromium PAGE.html OUT.png [--height 900] [--full-page]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
# Flags these machines need: the closed network refuses Chromium's background connections.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDTH = 1280


def chromium_path() -> str | None:
    """The system chromium, or None where it is not installed. ``$TRACE_RL_CHROMIUM``, when set, is the only
    executable looked at (a chromium elsewhere; or a missing path, to check that the tests fail without one)."""
    override = os.environ.get("TRACE_RL_CHROMIUM")
    if override is not None:
        return override if Path(override).exists() else None
    found = shutil.which("chromium") or (CHROMIUM if Path(CHROMIUM).exists() else None)
    return found


@contextlib.contextmanager
def browser() -> Iterator[Any]:
    """A headless Chromium with a fresh profile folder; closed (and its processes ended) on exit."""
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    if path is None:
        raise FileNotFoundError(f"chromium not found (looked on PATH and at {CHROMIUM})")
    profile = tempfile.mkdtemp(prefix="trace-rl-chromium-")
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile,
                executable_path=path,
                headless=True,
                args=FLAGS,
                viewport={"width": WIDTH, "height": 900},
            )
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(page_file: Path, out: Path, *, height: int = 900, full_page: bool = False) -> None:
    """Load a local HTML file at 1280 px wide and save a PNG of it."""
    with browser() as context:
        page = context.new_page()
        page.set_viewport_size({"width": WIDTH, "height": height})
        page.goto(page_file.resolve().as_uri())
        page.screenshot(path=str(out), full_page=full_page)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("page", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--full-page", action="store_true")
    args = parser.parse_args()
    screenshot(args.page, args.out, height=args.height, full_page=args.full_page)
    print(args.out)


if __name__ == "__main__":
    main()
