"""Unknown dimension keywords: a TypeError that names the valid ones and the closest."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
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
    checked.__kwdefaults__ = getattr(function, "__kwdefaults__", None)  # type: ignore[attr-defined]
    return checked
