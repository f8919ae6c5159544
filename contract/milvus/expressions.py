"""Docstore filters as Milvus boolean expressions (contract.milvus.index searches with them).

The filter is first validated by the docstore's own compiler (same 4xx messages on both backends). Field
names only reach the expression as a whitelisted schema field or as JSON-path keys matching the
docstore's field pattern, always inside quotes; values are rendered as literals with every quote,
backslash and control character escaped (Milvus string literals are C-style). The servers this was
written against (milvus-lite 3.2) do not take expression templates, so literals are escaped here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from contract.errors import BundleInvalid
from contract.index.docstore import FIELD_RE, RANGE_OPS, FilterError, compile_filter

META_FIELD = "metadata"  # the collection's JSON field holding a document's whole metadata object
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")  # a plain Milvus identifier
_ESCAPES = {"\\": "\\\\", '"': '\\"', "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# which Python values a typed field compares with (anything else goes through the JSON field, whose
# comparison with a value of another type is false, as SQLite's json_extract comparison is)
_ACCEPTS: dict[str, tuple[type, ...]] = {"VARCHAR": (str,), "INT64": (int, float), "DOUBLE": (int, float)}
_ACCEPTS["BOOL"] = (bool,)


def quote(value: str) -> str:
    """A Milvus string literal for `value`: every quote, backslash and control character escaped."""
    out = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            raise FilterError(f"filter value {value!r}: control characters are not allowed")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise FilterError(f"filter value {value!r}: must be a finite number")
        return repr(float(value))
    if isinstance(value, str):
        return quote(value)
    raise FilterError(f"filter value {value!r}: expected a string, number or boolean")


def _target(field: str, values: list[Any], fields: Mapping[str, Mapping[str, str]]) -> str:
    """The typed field when every value fits its type, else the JSON path of the metadata field."""
    typed = fields.get(field)
    if typed is not None:
        accepts = _ACCEPTS.get(typed["type"], ())
        # a Milvus server refuses a float literal against an INT64 field ("cannot cast value to Int64";
        # milvus-lite casts it): an integral float is written as an int below, any other goes to the JSON path
        integral = typed["type"] != "INT64" or all(not isinstance(v, float) or v.is_integer() for v in values)
        if integral and all(
            isinstance(v, accepts) and (typed["type"] == "BOOL") == isinstance(v, bool) for v in values
        ):
            name = typed["field"]
            if not NAME_RE.match(
                name
            ):  # a manifest is checksummed, but never trust a name into an expression
                raise BundleInvalid(f"manifest: Milvus field name {name!r} is not a plain identifier")
            return name
    if not FIELD_RE.match(field):
        raise FilterError(f"filter field {field!r}: use letters, digits, '_', '-' and '.' for nesting")
    return META_FIELD + "".join(f"[{quote(part)}]" for part in field.split("."))


def _literal_for(target: str, value: Any, fields: Mapping[str, Mapping[str, str]]) -> str:
    """`literal`, with an integral float written as an int where the target is a typed INT64 field."""
    int_fields = {f["field"] for f in fields.values() if f["type"] == "INT64"}
    if target in int_fields and isinstance(value, float) and value.is_integer():
        return str(int(value))
    return literal(value)


def filter_expression(filter: Mapping[str, Any], fields: Mapping[str, Mapping[str, str]]) -> str:
    """Translate a docstore filter (eq / in / range, AND-ed) into a Milvus boolean expression."""
    compile_filter(filter)  # the same validation, and the same error messages, as the FAISS path
    clauses: list[str] = []
    for field, cond in filter.items():
        conds = cond.items() if isinstance(cond, Mapping) else [("eq", cond)]
        for op, val in conds:
            if op == "in":
                target = _target(field, list(val), fields)
                clauses.append(f"{target} in [{', '.join(_literal_for(target, v, fields) for v in val)}]")
                continue
            target = _target(field, [val], fields)
            clauses.append(
                f"{target} {'==' if op == 'eq' else RANGE_OPS[op]} {_literal_for(target, val, fields)}"
            )
    return " and ".join(f"({c})" for c in clauses)
