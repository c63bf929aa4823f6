"""Version seams of the framework adapters: which releases of a framework an adapter supports and was tested
with, checked in one line. Pure (no framework import): `trace_rl.integrations.trl.compat` and
`trace_rl.integrations.verl.compat` hold the framework imports and call `VersionRange.check`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

Release = tuple[int, int, int]


class UnsupportedVersionError(RuntimeError):
    """An installed framework release outside the adapter's supported range, or one that moved a name the
    adapter imports; the message names the supported and tested releases in one line."""


def release(version: str) -> Release | None:
    """(major, minor, micro) of a version string such as "0.9.1", "1.18" or "0.10.0.dev"; None when unreadable."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", str(version).strip())
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)


def _text(r: Release) -> str:
    return ".".join(map(str, r))


@dataclass(frozen=True)
class VersionRange:
    """Releases ``minimum <= v < below`` of ``framework`` are supported; ``tested`` is the one the adapter's tests
    run against (the pinned release). Inside the range but not ``tested``: a one-line warning; outside: an error.

    Attributes:
        framework: the package's name as users install it ("trl", "verl").
        minimum: oldest supported release.
        below: first unsupported newer release.
        tested: the release the test suite installs.
        why_minimum: what the oldest release is the first to have (said when refusing an older one).
    """

    framework: str
    minimum: Release
    below: Release
    tested: str
    why_minimum: str = ""

    def describe(self) -> str:
        """``supported: trl >= 1.16.0, < 2.0.0; tested: 1.16.0``."""
        return f"supported: {self.framework} >= {_text(self.minimum)}, < {_text(self.below)}; tested: {self.tested}"

    def check(self, version: str) -> bool:
        """Check an installed ``version``: True when it is the tested release, False (after logging one warning
        line) when it is another supported one.

        Raises:
            UnsupportedVersionError: unreadable, older than ``minimum`` or not below ``below``.
        """
        found = release(version)
        install = f"pip install {self.framework}=={self.tested}"
        if found is None:
            raise UnsupportedVersionError(
                f"cannot read {self.framework}'s version {version!r} ({self.describe()}); {install}"
            )
        if found < self.minimum:
            why = f" ({self.why_minimum})" if self.why_minimum else ""
            raise UnsupportedVersionError(
                f"{self.framework} {version} is older than trace-rl's adapter supports{why} ({self.describe()}); "
                f"{install}"
            )
        if found >= self.below:
            raise UnsupportedVersionError(
                f"{self.framework} {version} is newer than trace-rl's adapter supports ({self.describe()}); {install}"
            )
        if found == release(self.tested):
            return True
        logging.getLogger("trace_rl.integrations").warning(
            "%s %s is not the tested release: the adapter's seams may have moved (%s)",
            self.framework,
            version,
            self.describe(),
        )
        return False

    def moved(self, version: str, name: str, error: BaseException) -> UnsupportedVersionError:
        """The error for a name the adapter imports that ``version`` does not have (one line)."""
        return UnsupportedVersionError(
            f"{self.framework} {version} has no {name} ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
            f"{self.describe()}; pip install {self.framework}=={self.tested}"
        )


__all__ = ["UnsupportedVersionError", "VersionRange", "release"]
