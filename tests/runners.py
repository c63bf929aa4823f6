"""External runners some tests need (node, chromium, an isolating sandbox): they never skip.

`make install` installs them where it can (apt-get as root: nodejs, chromium, bubblewrap). A test whose runner is
missing fails with a message naming what to install, so a CI machine without them cannot pass while leaving the
JavaScript port, the pages or the sandbox unchecked.
"""

from __future__ import annotations

import pytest

INSTALL = {
    "node": "node is not on PATH: install Node.js (`apt-get install nodejs`; `make install` does it as root)",
    "chromium": "chromium is not installed: install Debian's chromium (`apt-get install chromium "
    "fonts-liberation`; `make install` does it as root)",
    "sandbox": "no isolating sandbox backend works here: install bubblewrap (`apt-get install bubblewrap`; "
    "`make install` does it as root) or allow unprivileged user namespaces for `unshare`",
}


def require(runner: str, present: bool) -> None:
    """Fail the calling test (never skip) when ``runner`` is missing, naming what to install.

    Raises:
        KeyError: an unknown runner name.
    """
    message = INSTALL[runner]
    if not present:
        pytest.fail(message, pytrace=False)
