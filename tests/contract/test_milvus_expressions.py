"""Filter → Milvus expression translation: typed fields, JSON paths, and quoting that no value or field
name can break out of (the API-level injection test runs against a real server in
tests/app/bundles/test_backends.py)."""

from __future__ import annotations

import pytest

from contract.errors import ConfigError
from contract.index.docstore import FilterError
from contract.milvus.index import collection_name, filter_expression, literal, quote

FIELDS = {
    "year": {"field": "m_year", "type": "INT64"},
    "group": {"field": "m_group", "type": "VARCHAR", "max_length": "1"},
    "even": {"field": "m_even", "type": "BOOL"},
}


def test_eq_in_range_on_typed_fields():
    expr = filter_expression(
        {"group": "b", "year": {"gte": 2005, "lt": 2010}, "even": True, "tag": {"in": ["x", "y"]}}, FIELDS
    )
    assert expr == (
        '(m_group == "b") and (m_year >= 2005) and (m_year < 2010) and (m_even == true) and '
        '(metadata["tag"] in ["x", "y"])'
    )


def test_float_bounds_on_an_int_field_are_ints_or_take_the_json_field():
    # a Milvus server refuses `m_year >= 2005.0` ("cannot cast value to Int64"); milvus-lite accepted it
    assert filter_expression({"year": {"gte": 2005.0, "lt": 2010.0}}, FIELDS) == (
        "(m_year >= 2005) and (m_year < 2010)"
    )
    assert filter_expression({"year": {"in": [2005.0, 2006]}}, FIELDS) == "(m_year in [2005, 2006])"
    assert filter_expression({"year": {"gt": 2005.5}}, FIELDS) == '(metadata["year"] > 2005.5)'


def test_values_of_another_type_and_nested_fields_use_the_json_field():
    assert filter_expression({"year": "2005"}, FIELDS) == '(metadata["year"] == "2005")'
    assert filter_expression({"group": 1}, FIELDS) == '(metadata["group"] == 1)'
    assert filter_expression({"even": 1}, FIELDS) == '(metadata["even"] == 1)'  # bool fields take bools only
    assert filter_expression({"a.b-c": 1.5}, FIELDS) == '(metadata["a"]["b-c"] == 1.5)'


@pytest.mark.parametrize(
    "value, rendered",
    [
        ('b" or true or "', r'"b\" or true or \""'),
        ("b' or true or '", r'"b\' or true or \'"'),
        ("b\\", r'"b\\"'),
        ('\\" or true', r'"\\\" or true"'),
        ("tab\tnew\nline", r'"tab\tnew\nline"'),
    ],
)
def test_string_values_cannot_close_the_literal(value, rendered):
    assert quote(value) == rendered
    assert filter_expression({"group": value}, FIELDS) == f"(m_group == {rendered})"


def test_control_characters_non_finite_numbers_and_bad_names_are_refused():
    with pytest.raises(FilterError, match="control"):
        literal("a\x00b")
    with pytest.raises(FilterError, match="finite"):
        literal(float("inf"))
    for name in ['group" or true or "', "a b", "a[0]", "x)or(1", ""]:
        with pytest.raises(FilterError, match="filter field"):
            filter_expression({name: 1}, FIELDS)
    with pytest.raises(FilterError, match="unknown operator"):
        filter_expression({"year": {"or": 1}}, FIELDS)


def test_collection_names_are_plain_identifiers():
    assert (
        collection_name("infonce", "20260101T000000.000000Z-abc123")
        == "infonce_v20260101T000000_000000Z_abc123"
    )
    with pytest.raises(ConfigError):
        collection_name('x"; drop', "20260101T000000.000000Z-abc123")
