"""Checking a client's OpenAI request before anything is routed: a 4xx with one clear message, or what the
policy needs to know of it (model, estimated prompt tokens, requested output tokens, streaming).

Prompt length without a tokenizer: token ids count exactly; text counts ``ceil(chars / chars_per_token)``
(4 characters per token is the usual English average for Llama-family tokenizers); a chat adds 4 tokens per
message for the template. Nothing in a request is ever used as a path or a command.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

CHAT_TOKENS_PER_MESSAGE = 4


class BadRequest(Exception):
    """A client error: ``status`` and a message naming the field and what was expected."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "code": self.status}}


@dataclass(frozen=True)
class Inbound:
    """A checked client request: its body (forwarded as is, but for ``model``) and what routing reads of it."""

    body: dict[str, Any]
    model: str
    prompt_tokens: int
    max_tokens: int | None
    stream: bool


def parse_json(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 saying why not."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadRequest(400, f"request body is not valid JSON ({e})") from None
    if not isinstance(body, dict):
        raise BadRequest(400, f"request body must be a JSON object, got {type(body).__name__}")
    return body


def _text_tokens(text: str, cpt: float) -> int:
    return math.ceil(len(text) / cpt)


def _prompt_tokens(prompt: Any, cpt: float) -> int:
    if isinstance(prompt, str):
        return _text_tokens(prompt, cpt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return len(prompt)
        if all(isinstance(p, str) for p in prompt):
            return sum(_text_tokens(p, cpt) for p in prompt)
        if all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompt):
            return sum(len(p) for p in prompt)
    raise BadRequest(400, "'prompt' must be a string, a list of strings, a list of token ids or a list of "
                          f"token-id lists, got {json.dumps(prompt)[:80]}")


def _chat_tokens(messages: Any, cpt: float) -> int:
    if not isinstance(messages, list) or not messages:
        raise BadRequest(400, "'messages' must be a non-empty list of {role, content} objects")
    n = 0
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest(400, f"messages[{i}] must be an object with a string 'role'")
        content = m.get("content", "")
        if isinstance(content, list):  # OpenAI content parts: count the text ones
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        if content is not None and not isinstance(content, str):
            raise BadRequest(400, f"messages[{i}].content must be a string or a list of content parts")
        n += _text_tokens(content or "", cpt) + CHAT_TOKENS_PER_MESSAGE
    return n


def check_request(body: dict[str, Any], chat: bool, chars_per_token: float) -> Inbound:
    """The fields the router needs, or a BadRequest naming what is wrong."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest(400, "'model' is required and must be a string (see GET /v1/models)")
    if chat:
        tokens = _chat_tokens(body.get("messages"), chars_per_token)
    else:
        if "prompt" not in body:
            raise BadRequest(400, "'prompt' is required for /v1/completions")
        tokens = _prompt_tokens(body["prompt"], chars_per_token)
    key = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
    mt = body.get(key)
    if mt is not None and (not isinstance(mt, int) or isinstance(mt, bool) or mt < 1):
        raise BadRequest(400, f"'{key}' must be a positive integer, got {json.dumps(mt)[:40]}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(400, f"'stream' must be true or false, got {json.dumps(stream)[:40]}")
    return Inbound(body, model, tokens, mt, stream)
