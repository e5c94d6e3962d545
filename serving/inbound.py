"""Checking a client's OpenAI request before anything is routed: a 4xx with one clear message, or what the
policy needs to know of it (model, estimated prompt tokens, requested output tokens, streaming).

Every input ends in a clear 4xx or goes on: a body that is not UTF-8, not JSON, nested deeper than
``MAX_JSON_DEPTH``, holding NaN / Infinity / a number no JSON encoder writes back, or a lone UTF-16 surrogate
(``"\\ud800"``) is a 400; so is a field of the wrong type (the message names it, e.g. ``messages[0].content[1].text``)
and a ``max_tokens`` below 1 or beyond the context, answered with vLLM's own words.

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
HINTS_KEY = "llmsim"  # an optional object of routing hints in a client's body; never forwarded to a backend
HINT_KEYS = {"quality_by_model": "a quality in [0, 1]", "output_tokens_by_model": "an integer of at least 1"}
MAX_HINT_MODELS = 64
MAX_JSON_DEPTH = 64  # far above any OpenAI request (tool schemas included), far below Python's recursion limit
SHOWN_CHARS = 60  # of a bad value, in an error message


class BadRequest(Exception):
    """A client error: ``status`` and a message naming the field (``param``) and what was expected."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def body(self, message: str | None = None) -> dict[str, Any]:
        """OpenAI's (and vLLM's) error shape; ``message`` replaces this one's (a redacted copy of it)."""
        return {"error": {"message": self.message if message is None else message, "type": self.kind,
                          "param": self.param, "code": self.status}}


@dataclass(frozen=True)
class Inbound:
    """A checked client request: its body and raw bytes (forwarded as they are, but for ``model``) and what
    routing reads of it. ``min_prompt_tokens`` is what the prompt surely has (token ids: all of them; text: one
    per piece), which is what a context check may refuse on without a tokenizer."""

    body: dict[str, Any]
    model: str
    prompt_tokens: int
    max_tokens: int | None
    stream: bool
    raw: bytes = b""
    min_prompt_tokens: int = 1
    max_tokens_key: str = "max_tokens"
    quality_by_model: dict[str, float] | None = None  # routing hints (``HINTS_KEY``), by llmsim model name
    outputs_by_model: dict[str, int] | None = None

    def upstream_content(self, model: str) -> bytes:
        """The body for a backend serving ``model``: the client's own bytes when it asked for that name and sent
        no routing hints (nothing re-encoded), else the body with ``model`` replaced and the hints left out (ASCII
        JSON: any string survives)."""
        if self.raw and model == self.model and HINTS_KEY not in self.body:
            return self.raw
        body = {k: v for k, v in self.body.items() if k != HINTS_KEY}
        return json.dumps({**body, "model": model}, separators=(",", ":")).encode("ascii")


def show(v: Any) -> str:
    """A bad value as JSON, cut short, for a one-line message."""
    s = json.dumps(v)
    return s if len(s) <= SHOWN_CHARS else s[:SHOWN_CHARS - 3] + "..."


def parse_json(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 saying why not."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRequest(400, f"request body is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})"
                         ) from None
    try:
        body = json.loads(text, parse_constant=no_constant, parse_float=finite_float)
    except RecursionError:
        raise BadRequest(400, f"request body is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:  # JSONDecodeError, or an integer of more digits than Python converts
        raise BadRequest(400, f"request body is not valid JSON ({e})") from None
    if not isinstance(body, dict):
        raise BadRequest(400, f"request body must be a JSON object, got {type(body).__name__}")
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and too_deep(body):
        raise BadRequest(400, f"request body is nested deeper than {MAX_JSON_DEPTH} levels")
    if ("\\ud" in text or "\\uD" in text) and has_lone_surrogate(body):
        raise BadRequest(400, "request body holds a lone UTF-16 surrogate escape (such as \\ud800), which is not "
                              "Unicode text")
    return body


def no_constant(name: str) -> Any:
    raise BadRequest(400, f"request body is not valid JSON ({name} is not a JSON number)")


def finite_float(s: str) -> float:
    """A JSON number as a float; one too large for a float (1e400) is refused: no encoder writes it back."""
    v = float(s)
    if not math.isfinite(v):
        raise BadRequest(400, f"request body is not valid JSON (the number {s[:SHOWN_CHARS]} is out of range)")
    return v


def too_deep(body: Any) -> bool:
    """True if ``body`` nests more than MAX_JSON_DEPTH lists / objects (an iterative walk: no recursion)."""
    stack = [(body, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return True
        for x in v.values() if isinstance(v, dict) else v:
            if isinstance(x, (dict, list)):
                stack.append((x, depth + 1))
    return False


def has_lone_surrogate(body: Any) -> bool:
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _text_tokens(text: str, cpt: float) -> int:
    return math.ceil(len(text) / cpt)


def _is_ids(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in v)


def _prompt_tokens(prompt: Any, cpt: float) -> tuple[int, int]:
    """(estimated, sure) prompt tokens of a completions ``prompt``."""
    if isinstance(prompt, str):
        return _text_tokens(prompt, cpt), 1
    if isinstance(prompt, list) and prompt:
        if _is_ids(prompt):
            return len(prompt), len(prompt)
        if all(isinstance(p, str) for p in prompt):
            return sum(_text_tokens(p, cpt) for p in prompt), 1
        if all(_is_ids(p) for p in prompt):
            n = sum(len(p) for p in prompt)
            return n, n
    raise BadRequest(400, "'prompt' must be a string, a list of strings, a list of token ids or a list of "
                          f"token-id lists, got {show(prompt)}", param="prompt")


def _content_text(content: Any, at: str) -> str:
    """The text of a message's ``content``: a string, null, or OpenAI content parts (the text ones counted)."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise BadRequest(400, f"{at} must be a string, null or a list of content parts, got {show(content)}",
                         param=at)
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise BadRequest(400, f"{at}[{j}] must be an object with a string 'type', got {show(part)}",
                             param=f"{at}[{j}]")
        if part["type"] == "text":
            if not isinstance(part.get("text"), str):
                raise BadRequest(400, f"{at}[{j}].text must be a string, got {show(part.get('text'))}",
                                 param=f"{at}[{j}].text")
            texts.append(part["text"])
    return " ".join(texts)


def _chat_tokens(messages: Any, cpt: float) -> int:
    if not isinstance(messages, list) or not messages:
        raise BadRequest(400, "'messages' must be a non-empty list of {role, content} objects", param="messages")
    n = 0
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest(400, f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]")
        text = _content_text(m.get("content"), f"messages[{i}].content")
        n += _text_tokens(text, cpt) + CHAT_TOKENS_PER_MESSAGE
    return n


def _max_tokens(body: dict[str, Any], chat: bool) -> tuple[str, int | None]:
    """The output cap the backend will apply (a chat's ``max_completion_tokens`` first, as vLLM) and its key."""
    chosen: tuple[str, int | None] = ("max_tokens", None)
    for key in ("max_completion_tokens", "max_tokens") if chat else ("max_tokens",):
        v = body.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise BadRequest(400, f"'{key}' must be an integer, got {show(v)}", param=key)
        if v < 1:
            raise BadRequest(400, f"'{key}' must be at least 1, got {v}.", param=key)
        if chosen[1] is None:
            chosen = (key, v)
    return chosen


def routing_hints(body: dict[str, Any]) -> tuple[dict[str, float] | None, dict[str, int] | None]:
    """``llmsim: {quality_by_model: {model: q}, output_tokens_by_model: {model: n}}``, both optional: what a
    predictor outside the router (the QoS-aware edge router's classifiers, say) expects of this request on each
    model, by the llmsim name the policy knows a backend by (``policy_model``). Quality-aware rules and the
    ``oracle`` predictor read them as they read a simulated request's per-model truth."""
    hints = body.get(HINTS_KEY)
    if hints is None:
        return None, None
    if not isinstance(hints, dict) or any(k not in HINT_KEYS for k in hints):
        raise BadRequest(400, f"'{HINTS_KEY}' must be an object with keys among {sorted(HINT_KEYS)}, got "
                              f"{show(hints)}", param=HINTS_KEY)
    out: list[Any] = []
    for key, expected in HINT_KEYS.items():
        at, values = f"{HINTS_KEY}.{key}", hints.get(key)
        if values is None:
            out.append(None)
            continue
        if not isinstance(values, dict) or not 1 <= len(values) <= MAX_HINT_MODELS:
            raise BadRequest(400, f"'{at}' must be an object of 1 to {MAX_HINT_MODELS} model names, got "
                                  f"{show(values)}", param=at)
        for name, v in values.items():
            number = isinstance(v, int | float) and not isinstance(v, bool)
            ok = number and (0.0 <= v <= 1.0 if key == "quality_by_model" else isinstance(v, int) and v >= 1)
            if not ok:
                raise BadRequest(400, f"'{at}.{name[:SHOWN_CHARS]}' must be {expected}, got {show(v)}", param=at)
        out.append({name: (float(v) if key == "quality_by_model" else int(v)) for name, v in values.items()})
    return out[0], out[1]


def check_request(body: dict[str, Any], chat: bool, chars_per_token: float, raw: bytes = b"") -> Inbound:
    """The fields the router needs, or a BadRequest naming what is wrong."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest(400, "'model' is required and must be a string (see GET /v1/models)", param="model")
    if chat:
        tokens = _chat_tokens(body.get("messages"), chars_per_token)
        sure = len(body["messages"])
    else:
        if "prompt" not in body:
            raise BadRequest(400, "'prompt' is required for /v1/completions", param="prompt")
        tokens, sure = _prompt_tokens(body["prompt"], chars_per_token)
    key, mt = _max_tokens(body, chat)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(400, f"'stream' must be true or false, got {show(stream)}", param="stream")
    check_one_sequence(body.get("n"))
    quality, outputs = routing_hints(body)
    return Inbound(body, model, tokens, mt, stream, raw, sure, key, quality, outputs)


def check_one_sequence(n: Any) -> None:
    """``n`` (choices per request) is 1 or absent: the policy decides, and the router accounts, one sequence per
    request (a backend would run ``n`` of them on the one decision), so more is a 400 rather than a hidden load."""
    if n is None:
        return
    if isinstance(n, bool) or not isinstance(n, int):
        raise BadRequest(400, f"'n' must be an integer, got {show(n)}", param="n")
    if n != 1:
        raise BadRequest(400, f"'n' must be 1 (the router routes one sequence per request), got {show(n)}; send "
                              "separate requests for several completions", param="n")


def check_context(inbound: Inbound, max_model_len: int) -> None:
    """A 400 in vLLM's words when the prompt and ``max_tokens`` cannot fit ``max_model_len``: decided on the
    tokens the prompt surely has (no false refusal without a tokenizer), told with the router's estimate."""
    mt = inbound.max_tokens
    if mt is None or inbound.min_prompt_tokens + mt <= max_model_len:
        return
    n = max(inbound.prompt_tokens, inbound.min_prompt_tokens)
    raise BadRequest(400, f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                          f"{mt + n} tokens ({n} in the messages, {mt} in the completion). Please reduce the length "
                          "of the messages or completion.", param=inbound.max_tokens_key)
