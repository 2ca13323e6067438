"""Optional API keys: `authorization: Bearer <key>` metadata, compared in constant time."""
from __future__ import annotations

import hmac
from collections.abc import Sequence

from runtime.errors import Unauthenticated


def check_api_key(metadata: Sequence[tuple[str, str | bytes]], keys: tuple[str, ...]) -> None:
    """Passes when no keys are configured or the request carries one of them; else UNAUTHENTICATED."""
    if not keys:
        return
    header = next((v for k, v in metadata if k.lower() == "authorization"), None)
    if header is None:
        raise Unauthenticated("missing `authorization: Bearer <key>` metadata; this deployment requires an API key")
    token = _bearer(header)
    if not token:
        raise Unauthenticated("malformed authorization metadata; expected `Bearer <key>`")
    if not holds_key(metadata, keys):
        raise Unauthenticated("API key not recognised")


def holds_key(metadata: Sequence[tuple[str, str | bytes]], keys: tuple[str, ...]) -> bool:
    """Whether the request's bearer key is one of `keys` (constant time per key)."""
    header = next((v for k, v in metadata if k.lower() == "authorization"), None)
    token = _bearer(header) if header is not None else ""
    return bool(token) and any(hmac.compare_digest(token.encode(), k.encode()) for k in keys)


def _bearer(header: str | bytes) -> str:
    """The key of `Bearer <key>`, or "" for any other scheme."""
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    scheme, _, token = header.partition(" ")
    return token if scheme.lower() == "bearer" else ""
