"""The front's one link to the mesh: an AsyncClient per process, and the caller's API key passed through to it."""
from __future__ import annotations

from pathlib import PurePath
from typing import Any

from fastapi import Request
from starlette.requests import HTTPConnection

from omnimesh import AsyncClient, MeshInfo


def client(request: Request) -> AsyncClient:
    return request.app.state.client


def api_key(request: HTTPConnection) -> str | None:
    """The key of `Authorization: Bearer <key>`, sent on to the gateway, which alone decides whether it is good."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def served_model_name(state: Any, info: MeshInfo) -> str:
    """The `--served-model-name`, else the checkpoint's directory name, remembered in the app state."""
    if not state.model_name:
        state.model_name = PurePath(info.model).name or info.model
    return state.model_name
