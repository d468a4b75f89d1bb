"""The labkit commit a fingerprint records is the checkout's (found from the module's own place
in the package, which moved into labkit/core/)."""
import re
from pathlib import Path

import pytest

from labkit.core.fingerprint import labkit_commit

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout")
def test_the_commit_of_this_checkout_is_recorded():
    assert re.fullmatch(r"[0-9a-f]{12}(\+dirty)?", labkit_commit())
