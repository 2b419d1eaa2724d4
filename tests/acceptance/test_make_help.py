"""`make help` (and plain `make`) lists every target the Makefile documents."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed"),
]

ROOT = Path(__file__).resolve().parents[2]


def make(*args: str) -> str:
    result = subprocess.run(
        ["make", "-s", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_help_lists_each_phony_target_with_its_description() -> None:
    makefile = (ROOT / "Makefile").read_text()
    documented = dict(re.findall(r"^## ([\w-]+): (.+)$", makefile, re.M))
    phony = re.search(r"^\.PHONY: (.+)$", makefile, re.M)
    assert phony is not None
    assert set(documented) == set(phony.group(1).split())
    for target in documented:
        assert re.search(rf"^{target}:", makefile, re.M), f"{target} has no rule"

    listed = make("help")
    shown = dict(re.findall(r"^  make (\S+) +(.+)$", listed, re.M))
    assert shown == documented
    assert make() == listed  # the default goal: `make` alone never installs anything
