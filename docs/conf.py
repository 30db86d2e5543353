"""Sphinx configuration: the gangmesh documentation."""

from __future__ import annotations

from pathlib import Path

from gangmesh.cli import main as gangmesh_cli

project = "gangmesh"
author = "the gangmesh developers"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.doctest"]
exclude_patterns = ["_build", "_generated/*.json"]
html_theme = "alabaster"
autodoc_member_order = "bysource"
autodoc_typehints = "description"
doctest_global_setup = "import torch\nimport gangmesh as gm"

# Topology pictures, drawn by `gangmesh plan --format svg` at every build.
PICTURES = {
    "eight_tp2": "--world-size 8 --tp 2 --ranks-per-node 8",
    "sixteen_hsdp": "--world-size 16 --dp-replicate 2 --tp 2 --ranks-per-node 8",
    "two_nodes_pp": "--world-size 16 --pp 2 --tp 4 --ranks-per-node 8",
    "crossing_tp": "--world-size 12 --tp 4 --ranks-per-node 6",
    "tp_outermost": "--world-size 8 --tp 2 --order tp,pp,dp_replicate,dp_shard,cp",
    "eight_ep4": "--world-size 8 --dp-shard 4 --tp 2 --ep 4 --ranks-per-node 8",
}
_generated = Path(__file__).parent / "_generated"
_generated.mkdir(exist_ok=True)
for _name, _args in PICTURES.items():
    _output = str(_generated / f"{_name}.svg")
    if gangmesh_cli(["plan", *_args.split(), "--format", "svg", "--output", _output]):
        raise RuntimeError(f"gangmesh plan failed for {_name}")

# Docstring examples run under pytest --doctest-modules; here, only the pages' doctest blocks.
doctest_test_doctest_blocks = ""
