"""``tail``'s text output stays one unambiguous line per delivery whatever the value
holds (issue 17: values with tabs made it ambiguous): three tab-separated fields, the
value as JSON (tabs and newlines escaped), bytes as ``{"valueBase64": ...}``."""

from __future__ import annotations

import base64

import orjson
import pytest

from atomickafka.cli.tail_cmd import text_value
from atomickafka.client.delivery import Delivery


def _delivery(value: object, raw: bytes) -> Delivery:
    return Delivery("m-1", value, 7, ("a", "b"), "a", 0, 3, raw=raw)


@pytest.mark.parametrize(
    "value",
    [
        "a\tb",
        "line one\nline two\r\n",
        {"k": "tab\there", "n": [1, 2]},
        "",
        "\u00e9\t\u2028\u2029\x85\x0b\x0c\x1c",  # what str.splitlines also splits at
    ],
)
def test_a_value_with_tabs_and_newlines_stays_one_field_of_one_line(value: object) -> None:
    raw = orjson.dumps(value)
    text = text_value(_delivery(value, raw))
    line = f"7\tm-1\t{text}"
    assert len(line.splitlines()) == 1
    fields = line.split("\t")
    assert len(fields) == 3
    assert orjson.loads(fields[2]) == value


def test_bytes_are_printed_as_base64_and_read_back_exactly() -> None:
    raw = b"\xff\x00\tnot json\n"
    text = text_value(_delivery(raw, raw))
    assert "\t" not in text and "\n" not in text
    assert base64.b64decode(orjson.loads(text)["valueBase64"]) == raw


def test_json_lines_escape_every_line_break_too() -> None:
    from atomickafka.cli.tail_cmd import _LINE_BREAKS_JSON_KEEPS  # noqa: PLC0415

    value = "a\u2028b\u2029c\x85d"
    line = orjson.dumps({"value": value}).decode().translate(_LINE_BREAKS_JSON_KEEPS)
    assert len(line.splitlines()) == 1 and orjson.loads(line) == {"value": value}
