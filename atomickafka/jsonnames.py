"""The field names of AtomicKafka's own JSON outputs: one convention, applied by code.

Names are camelCase, as the wire format's (``messageID``, ``timeStamp``, the 2019
thesis's): words joined, each after the first capitalised; an id is ``ID``
(``nodeID``, as ``messageID``); a number with a unit names the unit last, spelled
``Seconds``, ``Ms`` (milliseconds) or ``PerSecond`` (a rate): ``oldestPendingAgeSeconds``,
``p99Ms``, ``recordsInPerSecond``. The Python attributes behind them stay snake_case;
:func:`json_name` maps an attribute name to its JSON name (``oldest_pending_age_s`` ->
``oldestPendingAgeSeconds``), so the two cannot drift apart, and :func:`camel_keys`
reads an object stored with the snake_case names of earlier versions.

Only an object's field names are converted, never the keys of a map whose keys are
data (topics, node names, message types): a topic may be called ``my_topic``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["JSON_NAME", "camel_keys", "json_name"]

#: What every name this module makes looks like: a lowercase first letter, then
#: letters and digits only.
JSON_NAME: Final = re.compile(r"[a-z][A-Za-z0-9]*")

_WORDS: Final = {"id": "ID", "s": "Seconds", "ms": "Ms"}


def json_name(name: str) -> str:
    """The JSON field name of attribute ``name``; a name without ``_`` is returned as is
    (so a camelCase name stays what it is)."""
    first, *rest = name.split("_")
    out = [first]
    for before, word in zip([first, *rest], rest, strict=False):
        if word == "s" and before == "per":
            out.append("Second")
        else:
            out.append(_WORDS.get(word, word[:1].upper() + word[1:]))
    return "".join(out)


def camel_keys(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data``'s fields under their JSON names, whichever names it was written with
    (when an object has a field under both names, the later one in it wins)."""
    return {json_name(k): v for k, v in data.items()}
