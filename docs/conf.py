"""Sphinx configuration: the gangmesh documentation."""

from __future__ import annotations

import enum
import importlib
import inspect
import re
import sys
import zlib
from pathlib import Path
from typing import Any

import sphinx.util.logging
import torch
from sphinx.errors import PycodeError
from sphinx.pycode import ModuleAnalyzer

import gangmesh as gm
from gangmesh.tools.cli import help_text
from gangmesh.tools.cli import main as gangmesh_cli

project = "gangmesh"
author = "the gangmesh developers"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.doctest", "sphinx.ext.intersphinx"]
exclude_patterns = ["_build", "_generated/*.json"]
html_theme = "alabaster"
# Wide enough for code of 100 columns beside the sidebar on a 1280-pixel screen.
html_theme_options = {"page_width": "96%", "body_max_width": "none", "code_font_size": "0.78em"}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
doctest_global_setup = "import torch\nimport gangmesh as gm"

# Topology pictures, drawn by `gangmesh plan --format svg` at every build.
PICTURES = {
    "eight_tp2": "--world-size 8 --tp 2 --ranks-per-node 8",
    "sixteen_fsdp": "--world-size 16 --tp 2 --ranks-per-node 8",
    "sixteen_hsdp": "--world-size 16 --dp-replicate 2 --tp 2 --ranks-per-node 8",
    "two_nodes_pp": "--world-size 16 --pp 2 --tp 4 --ranks-per-node 8 --rank 10",
    "crossing_tp": "--world-size 12 --tp 4 --ranks-per-node 6",
    "tp_outermost": "--world-size 8 --tp 2 --order tp,pp,dp_replicate,dp_shard,cp",
    "eight_ep4": "--world-size 8 --dp-shard 4 --tp 2 --ep 4 --ranks-per-node 8",
    "moe_ep4": "--world-size 8 --dp-shard 4 --tp 2 --ep 4 --ranks-per-node 8 --rank 2",
    "replica_groups": "--world-size 8 --tp 2 --ranks-per-node 8 --replica-groups 3",
    "two_models": "--part trainer=4:dp_shard=2,tp=2 --part generator=4:dp_replicate=2,tp=2",
    "joined_push": "--job trainer=4:dp_shard=2,tp=2 --job generator=4:dp_replicate=2,tp=2",
}
_generated = Path(__file__).parent / "_generated"
_generated.mkdir(exist_ok=True)
for _name, _args in PICTURES.items():
    _output = str(_generated / f"{_name}.svg")
    if gangmesh_cli(["plan", *_args.split(), "--format", "svg", "--output", _output]):
        raise RuntimeError(f"gangmesh plan failed for {_name}")

# The command-line reference (cli.rst) includes each parser's own --help text, wrapped to
# fit the page's code blocks.
for _command in ("gangmesh", "plan", "check", "join-server"):
    _text = help_text(None if _command == "gangmesh" else _command, width=62)
    (_generated / f"cli_{_command}.txt").write_text(_text, encoding="utf-8")

# Docstring examples run under pytest --doctest-modules; here, only the pages' doctest blocks.
doctest_test_doctest_blocks = ""

# --- The API reference (api.rst) -----------------------------------------------------------

# A parameter's type is shown beside its words (every parameter has words: see
# _check_parameters below); a return type, unless it is None.
autodoc_typehints_description_target = "documented_params"

# Links to torch, Python, numpy and hypothesis without a network: intersphinx reads
# small inventories written here, in the objects.inv format (version 2), instead of
# downloading each project's own. They hold the outside names that the API's signatures and
# docstrings use, each with its address in that project's documentation ("$" stands for the
# name).
INVENTORIES: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "torch": (
        "https://pytorch.org/docs/stable/",
        [
            ("torch.Tensor", "py:class", "tensors.html#$"),
            ("torch.device", "py:class", "tensor_attributes.html#$"),
            # PyTorch documents no ProcessGroup class: its section on groups stands for it,
            # also under the module name the class carries (ProcessGroup.__module__).
            ("torch.distributed.ProcessGroup", "py:class", "distributed.html#groups"),
            (
                "torch.distributed.distributed_c10d.ProcessGroup",
                "py:class",
                "distributed.html#groups",
            ),
            ("torch.distributed.Store", "py:class", "distributed.html#$"),
            ("torch.distributed.device_mesh.DeviceMesh", "py:class", "distributed.html#$"),
            ("torch.distributed.device_mesh.init_device_mesh", "py:function", "distributed.html#$"),
            ("torch.nn.modules.module.Module", "py:class", "generated/torch.nn.Module.html"),
            ("torch.optim.optimizer.Optimizer", "py:class", "optim.html#torch.optim.Optimizer"),
            # Bare names: autodoc leaves an annotation as written where it cannot evaluate
            # it (a class's __init__; Store, imported for type checking only).
            ("ProcessGroup", "py:class", "distributed.html#groups"),
            ("Optimizer", "py:class", "optim.html#torch.optim.Optimizer"),
            ("Store", "py:class", "distributed.html#torch.distributed.Store"),
            (
                "DeviceMesh",
                "py:class",
                "distributed.html#torch.distributed.device_mesh.DeviceMesh",
            ),
        ],
    ),
    "python": (
        "https://docs.python.org/3/",
        [
            *((name, "py:class", "library/functions.html#$") for name in ("bool", "float", "int")),
            *(
                (name, "py:class", "library/stdtypes.html#$")
                for name in ("dict", "list", "str", "tuple")
            ),
            ("None", "py:data", "library/constants.html#$"),
            *(
                (name, "py:exception", "library/exceptions.html#$")
                for name in ("NotImplementedError", "RuntimeError", "TypeError", "ValueError")
            ),
            ("contextlib.AbstractContextManager", "py:class", "library/contextlib.html#$"),
            ("datetime.timedelta", "py:class", "library/datetime.html#$"),
            ("pathlib.Path", "py:class", "library/pathlib.html#$"),
            ("subprocess.Popen", "py:class", "library/subprocess.html#$"),
            # Bare, as autodoc leaves it in a class's __init__ (see torch's bare names).
            ("timedelta", "py:class", "library/datetime.html#datetime.timedelta"),
            *(
                (f"collections.abc.{name}", "py:class", "library/collections.abc.html#$")
                for name in ("Callable", "Iterable", "Iterator", "Mapping", "Sequence")
            ),
            *(
                (f"typing.{name}", "py:data", "library/typing.html#$")
                for name in ("Any", "NoReturn")
            ),
        ],
    ),
    "numpy": (
        "https://numpy.org/doc/stable/",
        [("numpy.ndarray", "py:class", "reference/generated/numpy.ndarray.html#$")],
    ),
    "hypothesis": (
        "https://hypothesis.readthedocs.io/en/latest/",
        [("hypothesis.strategies.SearchStrategy", "py:class", "reference/strategies.html#$")],
    ),
}
intersphinx_mapping = {}
for _project, (_address, _entries) in INVENTORIES.items():
    _inventory = _generated / f"{_project}.inv"
    _lines = "".join(f"{name} {role} 1 {uri} -\n" for name, role, uri in _entries)
    _inventory.write_bytes(
        f"# Sphinx inventory version 2\n# Project: {_project}\n# Version: stable\n"
        "# The remainder of this file is compressed using zlib.\n".encode()
        + zlib.compress(_lines.encode())
    )
    intersphinx_mapping[_project] = (_address, str(_inventory))

# fairseq2's names: api.rst writes each alias's signature, which must be the function's own.
_ALIASES = {
    "setup_default_gang": "setup_root_gang",
    "setup_parallel_gangs": "create_parallel_gangs",
    "setup_hybrid_fsdp_gangs": "create_fsdp_gangs",
}
_api = (Path(__file__).parent / "api.rst").read_text(encoding="utf-8")
for _alias, _target in _ALIASES.items():
    _function = getattr(gm, _alias)
    if _function is not getattr(gm, _target):
        raise RuntimeError(f"gangmesh.{_alias} is no longer gangmesh.{_target}")
    _signature = inspect.signature(_function)
    _bare = _signature.replace(
        parameters=[p.replace(annotation=p.empty) for p in _signature.parameters.values()],
        return_annotation=_signature.empty,
    )
    if f".. py:function:: {_alias}{_bare}\n" not in _api:
        raise RuntimeError(f"api.rst: expected '.. py:function:: {_alias}{_bare}'")

# gangmesh.compat.fairseq2 serves gangmesh's own objects (and Device, which is torch.device):
# api.rst lists them, with links.
_compat = importlib.import_module("gangmesh.compat.fairseq2")
_names = []
for _name in _compat.__all__:
    _value = getattr(_compat, _name)
    if _value is getattr(gm, _name, None):
        _names.append(f":{'class' if isinstance(_value, type) else 'func'}:`~gangmesh.{_name}`")
    elif getattr(_value, "__module__", "").startswith(_compat.__name__):
        _directive = "autoclass" if isinstance(_value, type) else "autofunction"
        if f".. {_directive}:: gangmesh.compat.fairseq2.{_name}\n" not in _api:
            raise RuntimeError(f"api.rst: expected '.. {_directive}:: {_compat.__name__}.{_name}'")
    elif not (_name == "Device" and _value is torch.device):
        raise RuntimeError(f"gangmesh.compat.fairseq2.{_name} is not gangmesh.{_name}")
(_generated / "compat_fairseq2.inc").write_text(
    "Its other names are gangmesh's own objects: " + ", ".join(_names) + ".\n",
    encoding="utf-8",
)


def _data_docstring(
    app: Any, what: str, name: str, obj: object, options: Any, lines: list[str]
) -> None:
    """Give a re-exported constant the docstring written under its assignment.

    autodoc looks for it in the module the name is documented under, so
    gangmesh.DEFAULT_TIMEOUT would show timedelta's docstring instead of gangmesh/gang.py's.
    """
    if what != "data":
        return
    module, _, short = name.rpartition(".")
    for source in [module, *sorted(m for m in sys.modules if m.startswith("gangmesh."))]:
        try:
            docs = ModuleAnalyzer.for_module(source).find_attr_docs()
        except PycodeError:
            continue
        if ("", short) in docs and getattr(sys.modules[source], short, None) is obj:
            lines[:] = list(docs[("", short)])
            return


def _check_parameters(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Warn (an error under -W) about a parameter the docstring has no words for.

    A parameter has words in a ``:param name:`` line, or, for a class, as a documented
    attribute of the same name (the fields of a dataclass, a documented descriptor).
    """
    if what not in ("class", "function", "method") or (
        what == "class"
        and (issubclass(obj, (BaseException, enum.Enum)) or getattr(obj, "_is_protocol", False))
    ):
        return
    target = obj.__init__ if what == "class" else obj
    if target is object.__init__:
        return
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return
    documented = set(re.findall(r":param (?:[^:]* )?(?:\\?\*){0,2}(\w+):", "\n".join(lines)))
    if what == "class":
        attributes = ModuleAnalyzer.for_module(obj.__module__).find_attr_docs()
        documented |= {attr for cls, attr in attributes if cls == obj.__qualname__}
        # Attributes served by a documented descriptor (Gangs' gangs).
        documented |= {
            attr
            for attr, value in vars(obj).items()
            if inspect.isdatadescriptor(value) and inspect.getdoc(value)
        }
    missing = [p for p in parameters if p not in documented and p not in ("self", "cls")]
    if missing:
        _logger.warning(
            "%s: no words for the parameter%s %s; add ':param %s: ...' to its docstring",
            name,
            "s" if len(missing) > 1 else "",
            ", ".join(missing),
            missing[0],
        )


_logger = sphinx.util.logging.getLogger("gangmesh.docs")


def setup(app: Any) -> None:
    app.connect("autodoc-process-docstring", _data_docstring)
    app.connect("autodoc-process-docstring", _check_parameters)
