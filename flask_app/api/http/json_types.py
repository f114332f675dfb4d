"""Field types that accept exactly what JSON Schema says they accept, so the
OpenAPI document and the server agree: an integer is any JSON number with no
fraction (`5` and `5.0`), a number is any JSON number, never a string or a
boolean."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Strict


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_integral), Strict()]
JsonNumber = Annotated[float, Strict()]  # ints accepted (as JSON Schema's number)
# the smallest magnitude that rounds to infinity as float32 (2^128 - 2^103):
# anything below it is a finite float32 once rounded, and is accepted
FLOAT32_OVERFLOW = 3.4028235677973366e38
