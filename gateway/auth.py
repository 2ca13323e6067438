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
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated("malformed authorization metadata; expected `Bearer <key>`")
    if not any(hmac.compare_digest(token.encode(), k.encode()) for k in keys):
        raise Unauthenticated("API key not recognised")
