"""Keywords declared once: the signature that spells them out, and a TypeError that names
the valid ones and the closest for an unknown one."""

from __future__ import annotations

import difflib
import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import ParamSpec, TypeVar

from gangmesh.plan._checks import InvalidTypeError

_P = ParamSpec("_P")
_R = TypeVar("_R")


def closest(name: str, valid: list[str]) -> str | None:
    """The valid keyword ``name`` most likely meant: the nearest spelling, the one its
    words' initials spell (``tensor_parallel`` -> ``tp``), or the parallel dimension its
    one word names (``tensor`` -> ``tp``)."""
    near = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    if near:
        return near[0]
    words = [word for word in name.split("_") if word]
    initials = "".join(word[0] for word in words)
    if initials in valid:
        return initials
    dimension = f"{initials}p" if len(words) == 1 else ""
    return dimension if dimension in valid else None


def unknown_keyword_message(where: str, name: str, valid: list[str]) -> str:
    """What to tell a caller of ``where`` who passed keyword ``name``."""
    guess = closest(name, valid)
    hint = f"; did you mean {guess}=?" if guess else ""
    return f"{where}: unknown keyword {name}=; expected one of {', '.join(valid)}{hint}"


def check_keywords(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """``function``, raising a TypeError that names its keywords and the closest one when
    called with a keyword it does not take (instead of Python's bare "unexpected keyword").
    """
    parameters = inspect.signature(function).parameters
    valid = [
        name
        for name, p in parameters.items()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and name != "self"
    ]
    where = function.__qualname__.removesuffix(".__init__")

    @functools.wraps(function)
    def checked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        for name in kwargs:
            if name not in parameters:
                raise InvalidTypeError(unknown_keyword_message(where, name, valid))
        return function(*args, **kwargs)

    # read by tools, as inspect.signature is
    checked.__kwdefaults__ = {  # type: ignore[attr-defined]
        name: p.default
        for name, p in parameters.items()
        if p.kind is p.KEYWORD_ONLY and p.default is not p.empty
    }
    return checked


def with_keywords(
    declaration: type, defaults: Mapping[str, object]
) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """A decorator for a function that takes ``**keywords: Unpack[declaration]``: its
    signature (``__signature__``, what help(), IDEs and Sphinx show) spells out each key of
    the TypedDict ``declaration`` as a keyword-only parameter, with its type and its default
    in ``defaults`` (none: required), before the function's other keyword-only ones; and
    an unknown keyword raises the TypeError of :func:`check_keywords`.

    :param declaration: the TypedDict of the keywords.
    :param defaults: keyword -> default, for the keywords that have one.
    """
    hints = typing.get_type_hints(declaration)

    def spelled_out(function: Callable[_P, _R]) -> Callable[_P, _R]:
        signature = inspect.signature(function)
        declared = [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=defaults.get(name, inspect.Parameter.empty),
                annotation=hint,
            )
            for name, hint in hints.items()
        ]
        kept = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        at = next((i for i, p in enumerate(kept) if p.kind is p.KEYWORD_ONLY), len(kept))
        parameters = [*kept[:at], *declared, *kept[at:]]
        function.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        return check_keywords(function)

    return spelled_out
