"""The front's link to the mesh: its AsyncClients (one per gateway connection), and the caller's API key passed
through to them."""
from __future__ import annotations

from pathlib import PurePath
from typing import Any

from starlette.requests import HTTPConnection

from omnimesh import AsyncClient, MeshInfo, OmnimeshError


def client(request: HTTPConnection) -> AsyncClient:
    """The next of the front's gateway connections: each call takes one in turn."""
    return next(request.app.state.clients)


def api_key(request: HTTPConnection) -> str | None:
    """The key of `Authorization: Bearer <key>`, sent on to the gateway, which alone decides whether it is good."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


async def mesh_info(request: HTTPConnection) -> MeshInfo:
    """The gateway's Info, asked once per process (what a deployment serves does not change while it runs); the
    caller's key is checked by that first call like any other."""
    state = request.app.state
    if state.mesh_info is None:
        state.mesh_info = await client(request).info(api_key=api_key(request))
    return state.mesh_info


def served_model_name(state: Any, info: MeshInfo) -> str:
    """The `--served-model-name`, else the checkpoint's directory name, remembered in the app state."""
    if not state.model_name:
        state.model_name = PurePath(info.model).name or info.model
    return state.model_name


async def model_name(request: HTTPConnection, fallback: str) -> str:
    """The served model id, asked of the gateway on first use; `fallback` while the gateway cannot say (a stage that
    does not answer Info need not fail a chat that does not use it)."""
    state = request.app.state
    if not state.model_name:
        try:
            served_model_name(state, await client(request).info(api_key=api_key(request)))
        except OmnimeshError:
            return fallback
    return state.model_name
