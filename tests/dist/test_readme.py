"""The README's first script, run as its comment says (4 processes with torchrun's variables),
prints what it promises."""

from __future__ import annotations

import re

import pytest

from tests.dist.launch import REPO, torchrun_like

pytestmark = pytest.mark.dist


def test_readme_first_script(tmp_path):
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```python\n(# script\.py.*?)```", readme, re.S)
    assert block is not None, "the README's first script is missing"
    script = tmp_path / "script.py"
    script.write_text(block.group(1))
    run = torchrun_like(script, 4)
    assert run.returncode == 0, run.output
    assert sorted(re.findall(r"rank (\d): sum = 10\.0", run.output)) == ["0", "1", "2", "3"]
