"""Collected only under `make browser-test`, which installs chromium and the browser extra.

`make test` and a plain `pytest` never import these modules: the switch is an
environment variable, so no marker or ``-m`` expression is needed anywhere else.
"""

from __future__ import annotations

import os

ENABLE = "HOSTKIT_BROWSER_TEST"

collect_ignore_glob = [] if os.environ.get(ENABLE) == "1" else ["test_*.py"]
