"""Calls on Ray actors that name the actor class's own method
(`call(actor, Shard.info, ...)`), not an attribute of an untyped handle:
mypy checks that the method exists and takes those arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec

P = ParamSpec("P")


def call(
    actor: Any, method: Callable[Concatenate[Any, P], Any], *args: P.args, **kwargs: P.kwargs
) -> Any:
    """`method` run by `actor`: its ObjectRef."""
    return getattr(actor, method.__name__).remote(*args, **kwargs)


def stream(
    actor: Any, method: Callable[Concatenate[Any, P], Any], *args: P.args, **kwargs: P.kwargs
) -> Any:
    """`method` (a generator) run by `actor`: an ObjectRefGenerator of its items."""
    return getattr(actor, method.__name__).options(num_returns="streaming").remote(*args, **kwargs)
