"""pydantic's validation errors as one plain sentence per field (the 422 body's `message` and `details`).

pydantic reports a value that fits no member of a union once per member, each under a location holding
the member's internal name: a filter value of the wrong type came back as six errors under
`body.filter.year.function-before[_scalar(), union[function-after[valid_unicode(), str],…]]`, ~2 KB for
one mistake (issue 44, item 4). Here:

- the location keeps only the request's own names (`body.filter.year.gte`); pydantic's schema tags
  (anything with a bracket or a parenthesis, `constrained-int`, and a union member's bare type name right
  after one) are dropped;
- errors under one location become one sentence: a list of the types it may take when every union member
  refused it, or the one error's own words otherwise ("must not be empty" for pydantic's "at least 1 item");
- a location under which a deeper one also failed is left out: the input took that member's shape
  (`{"gte": "abc"}` is an object, so the condition is what it meant), and the deeper sentence says what is
  wrong with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# pydantic error type -> the kind of value that member wanted (a refused union lists them all)
_KINDS = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "int_parsing": "an integer",
    "bool_type": "a boolean",
    "list_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "none_required": "null",
}
_BARE_TYPES = frozenset({"str", "int", "float", "bool", "none", "list", "dict", "bytes"})
_PREFIXES = ("Input should be ", "Value should be ", "Value error, ", "Assertion failed, ")


def _is_tag(part: Any, previous_was_tag: bool) -> bool:
    """A pydantic schema name in a location, not one of the request's fields or list positions."""
    if not isinstance(part, str):
        return False
    if any(c in part for c in "[(") or part.startswith(("constrained-", "function-", "lax-", "json-or-")):
        return True
    return previous_was_tag and part in _BARE_TYPES


def field_name(loc: Sequence[Any], kind: str = "") -> str:
    """`("body", "filter", "year", "function-before[…]", "bool")` → `body.filter.year`. A type miss whose
    location ends in that member's bare type name (`…, "eq", "bool"`: a union of plain types) drops it too."""
    kept: list[str] = []
    previous = False
    for part in loc:
        previous = _is_tag(part, previous)
        if not previous:
            kept.append(str(part))
    if kept and kind in _KINDS and kept[-1] in _BARE_TYPES and loc and loc[-1] == kept[-1]:
        kept.pop()
    return ".".join(kept)


def _one(error: dict[str, Any]) -> str:
    """One error's sentence, in words a person reads (no pydantic class or function names)."""
    kind, ctx = error.get("type", ""), error.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a field this request takes (check its spelling)"
    if kind in ("too_short", "string_too_short"):
        least = int(ctx.get("min_length", 1))
        if least <= 1:
            return "must not be empty"
        unit = "characters" if kind == "string_too_short" else "items"
        return f"must hold at least {least} {unit}"
    if kind in ("too_long", "string_too_long"):
        unit = "characters" if kind == "string_too_long" else "items"
        return f"must hold at most {ctx.get('max_length')} {unit}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    if kind in _KINDS:
        return f"must be {_KINDS[kind]}"
    message = str(error.get("msg", "is not valid"))
    for prefix in _PREFIXES:
        if message.startswith(prefix):
            message = ("must be " if prefix.endswith("be ") else "") + message.removeprefix(prefix)
    return message[:1].lower() + message[1:]


def _either(kinds: list[str]) -> str:
    unique = list(dict.fromkeys(kinds))
    return unique[0] if len(unique) == 1 else ", ".join(unique[:-1]) + " or " + unique[-1]


def _sentence(errors: list[dict[str, Any]]) -> tuple[str, str]:
    """(the field's sentence, the pydantic error type it stands for)."""
    kinds = [_KINDS[e["type"]] for e in errors if e.get("type") in _KINDS]
    if len(errors) > 1 and len(kinds) == len(errors):  # every member of a union refused its type
        return f"must be {_either(kinds)}", "type_error"
    # a member whose own check failed (a range, a pattern, a value error) says more than the type misses
    specific = [e for e in errors if e.get("type") not in _KINDS] or errors
    return "; ".join(dict.fromkeys(_one(e) for e in specific)), str(specific[0].get("type", ""))


def field_errors(errors: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """`[{"field", "message", "type"}]`, one per field at fault, in the order pydantic found them."""
    by_field: dict[str, list[dict[str, Any]]] = {}
    for error in errors:
        by_field.setdefault(field_name(error.get("loc", ()), error.get("type", "")), []).append(error)
    deepest = [f for f in by_field if not any(g.startswith(f + ".") for g in by_field)]
    said = {f: _sentence(by_field[f]) for f in deepest}
    return [{"field": f, "message": message, "type": kind} for f, (message, kind) in said.items()]
