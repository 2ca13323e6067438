"""The front's one link to the mesh: an AsyncClient per process, and the caller's API key passed through to it."""
from __future__ import annotations

from fastapi import Request

from omnimesh import AsyncClient


def client(request: Request) -> AsyncClient:
    return request.app.state.client


def api_key(request: Request) -> str | None:
    """The key of `Authorization: Bearer <key>`, sent on to the gateway, which alone decides whether it is good."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None
