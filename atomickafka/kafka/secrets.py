"""Loading the signing secret (docs/DESIGN.md §4.14) for any role: node, merger, client.

A secret file holds one secret per line; the first signs, all are accepted (key
rotation). The secret is never logged or printed: :class:`~atomickafka.core.signing.
Signer` does not show it in its ``repr``.
"""

from __future__ import annotations

from pathlib import Path

from atomickafka.core.signing import SecretError, Signer, parse_secrets

__all__ = ["load_signer", "signer_from"]


def load_signer(secret_file: str | Path | None) -> Signer | None:
    """The signer of ``secret_file`` (``None`` when signing is off); :class:`SecretError`
    when the file cannot be read or holds no usable secret."""
    if secret_file is None:
        return None
    path = Path(secret_file)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SecretError(f"cannot read the secret file {path}: {exc.strerror}") from exc
    return Signer(parse_secrets(text, str(path)))


def signer_from(
    secret: str | bytes | None = None, secret_file: str | Path | None = None
) -> Signer | None:
    """A signer from a secret given directly (one secret, or several lines) or from a
    file; ``None`` when neither is given; both at once is an error."""
    if secret is not None and secret_file is not None:
        raise SecretError("give the secret or the secret file, not both")
    if secret is not None:
        text = secret.decode() if isinstance(secret, bytes) else secret
        return Signer(parse_secrets(text, "the secret"))
    return load_signer(secret_file)
