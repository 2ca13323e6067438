"""`/v1/realtime`: OpenAI's Realtime WebSocket, turn-based (no voice activity detection): the client appends audio and
commits it (or creates items), then asks for a response, which streams text, or speech with its transcript."""
from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import uuid
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any

import grpc
from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from omnimesh import (AsyncClient, Audio, AudioDelta, Done, Image, Message, OmnimeshError, Sampling, TextDelta, Usage,
                      wav_bytes)
from omnimesh.messages import Part
from http_front.chat_input import data_url
from http_front.errors import RequestError, grpc_error_body
from http_front.gateway import api_key, served_model_name

log = logging.getLogger(__name__)
router = APIRouter()

INPUT_RATE = 24_000  # input_audio_buffer.append carries 16-bit mono PCM at this rate, as OpenAI's audio/pcm


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


@dataclass
class Item:
    """A conversation item: one message."""

    id: str
    role: str
    parts: list[Part]
    content: list[dict]  # as the client sees it (audio bytes left out)

    def json(self, status: str = "completed") -> dict:
        return {"id": self.id, "object": "realtime.item", "type": "message", "role": self.role, "status": status,
                "content": self.content}


@dataclass
class Settings:
    """What `session.update` sets."""

    instructions: str = ""
    output_modalities: list[str] = field(default_factory=lambda: ["audio"])
    voice: str = ""
    max_output_tokens: int | None = None
    temperature: float | None = None

    def update(self, session: dict) -> None:
        self.instructions = session.get("instructions", self.instructions)
        modalities = session.get("output_modalities", session.get("modalities"))
        if modalities is not None:
            self.output_modalities = ["audio"] if "audio" in modalities else ["text"]
        output = (session.get("audio") or {}).get("output") or {}
        self.voice = output.get("voice", session.get("voice", self.voice)) or ""
        tokens = session.get("max_output_tokens", session.get("max_response_output_tokens"))
        if tokens is not None:
            self.max_output_tokens = None if tokens == "inf" else int(tokens)
        self.temperature = session.get("temperature", self.temperature)

    def json(self, model: str) -> dict:
        return {"type": "realtime", "object": "realtime.session", "model": model, "instructions": self.instructions,
                "output_modalities": self.output_modalities,
                "max_output_tokens": self.max_output_tokens if self.max_output_tokens is not None else "inf",
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": INPUT_RATE}, "turn_detection": None},
                          "output": {"format": {"type": "audio/pcm", "rate": 24_000}, "voice": self.voice}}}


class RealtimeSession:
    """One WebSocket: its settings, conversation and input audio buffer, and at most one response at a time."""

    def __init__(self, ws: WebSocket, client: AsyncClient, key: str | None, model: str) -> None:
        self.ws = ws
        self.client = client
        self.key = key
        self.model = model
        self.settings = Settings()
        self.items: list[Item] = []
        self.buffer = bytearray()
        self.response: asyncio.Task | None = None
        self.closed = False  # the client left: a response ends without a word
        self.handlers = {"session.update": self.session_update, "input_audio_buffer.append": self.append,
                         "input_audio_buffer.commit": self.commit, "input_audio_buffer.clear": self.clear,
                         "conversation.item.create": self.item_create, "response.create": self.response_create,
                         "response.cancel": self.response_cancel}

    async def send(self, type_: str, **fields: Any) -> None:
        await self.ws.send_json({"type": type_, "event_id": _id("event"), **fields})

    async def error(self, message: str, code: str, param: str | None = None, event_id: str | None = None,
                    type_: str = "invalid_request_error") -> None:
        await self.send("error", error={"type": type_, "code": code, "message": message, "param": param,
                                        "event_id": event_id})

    async def run(self) -> None:
        await self.send("session.created", session=self.settings.json(self.model))
        try:
            while True:
                try:
                    event = json.loads(await self.ws.receive_text())
                except json.JSONDecodeError as err:
                    await self.error(f"an event is one JSON object: {err}", "invalid_json")
                    continue
                if not isinstance(event, dict):
                    await self.error("an event is one JSON object", "invalid_json")
                    continue
                handler = self.handlers.get(event.get("type", ""))
                if handler is None:
                    await self.error(f"unknown or unsupported event type {event.get('type')!r}", "unknown_event",
                                     "type", event.get("event_id"))
                    continue
                try:
                    await handler(event)
                except RequestError as err:
                    await self.error(err.message, err.code or "invalid_value", err.param, event.get("event_id"))
        except WebSocketDisconnect:
            pass
        finally:
            self.closed = True
            if self.response is not None:
                self.response.cancel()

    async def session_update(self, event: dict) -> None:
        self.settings.update(event.get("session") or {})
        await self.send("session.updated", session=self.settings.json(self.model))

    async def append(self, event: dict) -> None:
        try:
            self.buffer += base64.b64decode(event.get("audio", ""), validate=True)
        except (binascii.Error, ValueError):
            raise RequestError("audio is not valid base64", "audio") from None

    async def clear(self, event: dict) -> None:
        self.buffer.clear()
        await self.send("input_audio_buffer.cleared")

    async def commit(self, event: dict) -> None:
        if len(self.buffer) < 2:
            raise RequestError("the input audio buffer is empty; append audio before committing", None,
                               code="input_audio_buffer_commit_empty")
        pcm, self.buffer = bytes(self.buffer[: len(self.buffer) // 2 * 2]), bytearray()
        item = Item(_id("item"), "user", [Audio(wav_bytes(pcm, INPUT_RATE), "audio/wav")],
                    [{"type": "input_audio", "transcript": None}])
        await self.send("input_audio_buffer.committed", item_id=item.id, previous_item_id=self._last_id())
        await self._add(item)

    async def item_create(self, event: dict) -> None:
        raw = event.get("item") or {}
        if raw.get("type", "message") != "message" or raw.get("role") not in ("user", "system", "assistant"):
            raise RequestError("items are messages with role user, system or assistant", "item.role")
        parts, content = [], []
        for i, c in enumerate(raw.get("content") or []):
            parts.append(_content_part(c, f"item.content[{i}]"))
            content.append({k: v for k, v in c.items() if k != "audio"})
        await self._add(Item(raw.get("id") or _id("item"), raw["role"], parts, content))

    async def _add(self, item: Item) -> None:
        previous = self._last_id()
        self.items.append(item)
        await self.send("conversation.item.added", previous_item_id=previous, item=item.json())
        await self.send("conversation.item.done", previous_item_id=previous, item=item.json())

    def _last_id(self) -> str | None:
        return self.items[-1].id if self.items else None

    async def response_create(self, event: dict) -> None:
        if self.response is not None and not self.response.done():
            raise RequestError("a response is in progress; wait for response.done or send response.cancel", None,
                               code="conversation_already_has_active_response")
        overrides = replace(self.settings)
        overrides.update(event.get("response") or {})
        self.response = asyncio.create_task(Response(self, overrides).run())

    async def response_cancel(self, event: dict) -> None:
        if self.response is not None and not self.response.done():
            self.response.cancel()


def _content_part(c: dict, param: str) -> Part:
    kind = c.get("type")
    if kind in ("input_text", "text", "output_text"):
        return str(c.get("text", ""))
    if kind == "input_audio":
        try:
            return Audio(wav_bytes(base64.b64decode(c.get("audio", ""), validate=True), INPUT_RATE), "audio/wav")
        except (binascii.Error, ValueError):
            raise RequestError("is not valid base64", f"{param}.audio") from None
    if kind == "input_image":
        return Image(*data_url(str(c.get("image_url", "")), f"{param}.image_url"))
    raise RequestError(f"content type {kind!r} is not served; use input_text, input_audio or input_image",
                       f"{param}.type")


class Response:
    """One response: the conversation through the gateway, streamed as the Realtime API's response events."""

    def __init__(self, session: RealtimeSession, settings: Settings) -> None:
        self.s = session
        self.settings = settings
        self.id = _id("resp")
        self.item = Item(_id("item"), "assistant", [], [])
        self.speak = "audio" in settings.output_modalities
        self.where = {"response_id": self.id, "item_id": self.item.id, "output_index": 0, "content_index": 0}

    def json(self, status: str, output: list[dict], usage: Usage | None = None, details: dict | None = None) -> dict:
        return {"id": self.id, "object": "realtime.response", "status": status, "status_details": details,
                "output": output, "output_modalities": self.settings.output_modalities,
                "usage": None if usage is None else {
                    "total_tokens": usage.prompt_tokens + usage.completion_tokens,
                    "input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens}}

    async def run(self) -> None:
        s = self.s
        await s.send("response.created", response=self.json("in_progress", []))
        await s.send("response.output_item.added", response_id=self.id, output_index=0,
                     item=self.item.json("in_progress"))
        await s.send("conversation.item.added", previous_item_id=s._last_id(), item=self.item.json("in_progress"))
        part = {"type": "audio", "transcript": ""} if self.speak else {"type": "text", "text": ""}
        await s.send("response.content_part.added", part=part, **self.where)
        text, usage, status, details = "", None, "completed", None
        try:
            async with aclosing(self._events()) as events:  # leaving early cancels the gateway call at once
                async for event in events:
                    if isinstance(event, TextDelta) and event.text:
                        text += event.text
                        kind = "response.output_audio_transcript.delta" if self.speak else "response.output_text.delta"
                        await s.send(kind, delta=event.text, **self.where)
                    elif isinstance(event, AudioDelta):
                        await s.send("response.output_audio.delta", delta=base64.b64encode(event.pcm16).decode(),
                                     **self.where)
                    elif isinstance(event, Usage):
                        usage = event
                    elif isinstance(event, Done) and event.finish_reason == "length":
                        status, details = "incomplete", {"type": "incomplete", "reason": "max_output_tokens"}
        except OmnimeshError as err:
            error = grpc_error_body(err)[1]["error"]
            await s.error(error["message"], error["code"], error["param"], type_=error["type"])
            status, details = "failed", {"type": "failed", "error": error}
        except asyncio.CancelledError:
            if s.closed:
                raise
            status, details = "cancelled", {"type": "cancelled", "reason": "client_cancelled"}
        await self._finish(text, usage, status, details)

    def _events(self) -> Any:
        s, st = self.s, self.settings
        messages = ([Message.system(st.instructions)] if st.instructions else []) + \
            [Message(i.role, tuple(i.parts)) for i in s.items]
        return s.client.chat_stream(messages, sampling=Sampling(max_tokens=st.max_output_tokens,
                                                                temperature=st.temperature),
                                    speak=self.speak, voice=st.voice, request_id=self.id, api_key=s.key)

    async def _finish(self, text: str, usage: Usage | None, status: str, details: dict | None) -> None:
        s = self.s
        if self.speak:
            part = {"type": "output_audio", "transcript": text}
            await s.send("response.output_audio.done", **self.where)
            await s.send("response.output_audio_transcript.done", transcript=text, **self.where)
        else:
            part = {"type": "output_text", "text": text}
            await s.send("response.output_text.done", text=text, **self.where)
        await s.send("response.content_part.done", part=part, **self.where)
        self.item.parts, self.item.content = [text], [part]
        if text:  # the next turn sees what was said
            s.items.append(self.item)
        item = self.item.json("completed" if status == "completed" else "incomplete")
        await s.send("response.output_item.done", response_id=self.id, output_index=0, item=item)
        await s.send("conversation.item.done", item=item)
        await s.send("response.done", response=self.json(status, [item], usage, details))


@router.websocket("/v1/realtime")
async def realtime(ws: WebSocket) -> None:
    client: AsyncClient = next(ws.app.state.clients)
    key = api_key(ws)
    try:  # a key the gateway refuses fails the handshake, as OpenAI's does
        model = served_model_name(ws.app.state, await client.info(api_key=key))
    except OmnimeshError as err:
        if err.code is grpc.StatusCode.UNAUTHENTICATED:
            await ws.close(code=1008, reason=err.message[:120])
            return
        model = ws.app.state.model_name or ws.query_params.get("model", "")
    await ws.accept()
    await RealtimeSession(ws, client, key, model).run()
