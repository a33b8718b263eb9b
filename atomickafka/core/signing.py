"""Signed records: an HMAC-SHA256 over a record's bytes and its topic (docs/DESIGN.md §4.14).

With a secret configured (``--secret-file``), every record an AtomicKafka member writes
-- client records, bundles, deliveries, ticks, watermarks, statuses, snapshots --
carries the header :data:`SIGNATURE_HEADER`: the HMAC-SHA256, under the secret, of the
topic name, the key, the value and every other header, each length-prefixed, so no
byte of the record can be changed, moved to another topic or dropped without the
signature failing. Nodes set aside unsigned or wrongly signed records with the reason,
readers holding the secret drop forged deliveries and count them.

What it protects against: any writer of the input logs or delivery topics who does not
hold the secret (a misconfigured producer, a compromised or careless application with
write access). What it does not: a member holding the secret (it can sign anything),
replays of genuine records within their topic (the protocol's de-duplication handles
those), and reading (signing is not encryption). Kafka ACLs remain the first line.

Key rotation: a secret file holds one secret per line; the first signs, every one is
accepted. Rotate by adding the new secret as a second line everywhere, then swapping
the lines everywhere, then removing the old one.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from atomickafka.core.reasons import Reason, Refusal, refusal
from atomickafka.errors import AtomicKafkaError

__all__ = [
    "SIGNATURE_HEADER",
    "SecretError",
    "Signer",
    "parse_secrets",
]

#: The header carrying a record's signature: ``v1:`` and 64 hex digits.
SIGNATURE_HEADER: Final = "atomickafka-sig"
_PREFIX: Final = b"v1:"
_DOMAIN: Final = b"atomickafka-record-v1\x00"
_MIN_SECRET_BYTES: Final = 16
_KEY_ID_TEXT: Final = b"atomickafka-key-id-v1"

HeaderPairs = Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None]


class SecretError(AtomicKafkaError, ValueError):
    """A secret file that cannot be used (unreadable, empty, too short)."""


def parse_secrets(text: str, source: str = "the secret file") -> list[bytes]:
    """The secrets of a secret file's text: one per non-empty line (``#`` starts a
    comment line), at least 16 bytes each; the first signs, all are accepted."""
    secrets = [
        line.strip().encode()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not secrets:
        raise SecretError(f"{source} holds no secret (one per line)")
    short = [i + 1 for i, s in enumerate(secrets) if len(s) < _MIN_SECRET_BYTES]
    if short:
        raise SecretError(
            f"{source}: secret {short[0]} is shorter than {_MIN_SECRET_BYTES} bytes; "
            "use e.g. `openssl rand -hex 32`"
        )
    return secrets


def _pairs(headers: HeaderPairs | None) -> Iterable[tuple[str, str | bytes | None]]:
    if not headers:
        return ()
    return headers.items() if isinstance(headers, Mapping) else headers


def _field(data: bytes | None) -> bytes:
    if data is None:
        return b"\xff\xff\xff\xff"  # absent, told apart from empty
    return struct.pack(">I", len(data)) + data


def _as_bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _message(
    topic: str, key: str | bytes | None, value: bytes | None, headers: HeaderPairs | None
) -> bytes:
    parts = [_DOMAIN, _field(topic.encode()), _field(_as_bytes(key)), _field(value)]
    for name, header in _pairs(headers):
        if name != SIGNATURE_HEADER:
            parts.append(_field(name.encode()))
            parts.append(_field(_as_bytes(header)))
    return b"".join(parts)


class Signer:
    """Signs records with the first secret and accepts any of them."""

    def __init__(self, secrets: Sequence[bytes]) -> None:
        if not secrets:
            raise SecretError("a signer needs at least one secret")
        self._secrets = tuple(secrets)

    def __repr__(self) -> str:
        return f"Signer(<{len(self._secrets)} secrets>)"  # never the secrets themselves

    def key_ids(self) -> tuple[str, ...]:
        """A short id of each secret, in the file's order (the first signs): 12 hex
        digits of an HMAC under the secret of a fixed text, published in statuses so
        that a client can tell, before it sends, whether the nodes would take what it
        signs. It gives nothing away that a signed record does not: every record
        carries an HMAC under the same secret of text anyone can read."""
        return tuple(
            hmac.new(secret, _KEY_ID_TEXT, hashlib.sha256).hexdigest()[:12]
            for secret in self._secrets
        )

    def _digest(self, secret: bytes, message: bytes) -> bytes:
        return hmac.new(secret, message, hashlib.sha256).hexdigest().encode()

    def signature(
        self,
        topic: str,
        key: str | bytes | None,
        value: bytes | None,
        headers: HeaderPairs | None = None,
    ) -> tuple[str, bytes]:
        """The signature header for a record to ``topic`` with these contents."""
        digest = self._digest(self._secrets[0], _message(topic, key, value, headers))
        return (SIGNATURE_HEADER, _PREFIX + digest)

    def signed_headers(
        self,
        topic: str,
        key: str | bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> list[tuple[str, bytes]]:
        """``headers`` with the signature appended."""
        return [*headers, self.signature(topic, key, value, headers)]

    def problem(
        self,
        topic: str,
        key: str | bytes | None,
        value: bytes | None,
        headers: HeaderPairs | None,
    ) -> str | None:
        """Why a record read from ``topic`` is not validly signed (the prose of
        :meth:`refusal`), or ``None`` when it is."""
        found = self.refusal(topic, key, value, headers)
        return None if found is None else found.text

    def refusal(
        self,
        topic: str,
        key: str | bytes | None,
        value: bytes | None,
        headers: HeaderPairs | None,
    ) -> Refusal | None:
        """Why a record read from ``topic`` is not validly signed, or ``None`` when it is."""
        given = [h for n, h in _pairs(headers) if n == SIGNATURE_HEADER]
        if not given:
            return refusal(
                Reason.UNSIGNED, f"no {SIGNATURE_HEADER} header (signing is on for this topic)"
            )
        if len(given) > 1:
            return refusal(Reason.BAD_SIGNATURE, f"more than one {SIGNATURE_HEADER} header")
        found = _as_bytes(given[0]) or b""
        if not found.startswith(_PREFIX):
            return refusal(Reason.BAD_SIGNATURE, f"{SIGNATURE_HEADER} header of an unknown form")
        message = _message(topic, key, value, headers)
        claimed = found[len(_PREFIX) :]
        if any(hmac.compare_digest(claimed, self._digest(s, message)) for s in self._secrets):
            return None
        return refusal(
            Reason.BAD_SIGNATURE,
            "wrong signature: not signed with a secret this member holds, or altered",
        )
