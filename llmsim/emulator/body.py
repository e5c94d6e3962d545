"""What a request to the emulator says: its JSON body read within a size limit and checked field by field into a
:class:`Job` (400 / 404 naming the field, in OpenAI's error shape, as vLLM's OpenAI server answers). Token counts
are approximations without a tokenizer (:func:`text_tokens`, docs/emulator.md)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from pydantic import TypeAdapter, ValidationError

from llmsim.emulator.engine import EmulatorOptions, request_seed

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # vLLM's (and OpenAI's) default for /v1/completions
CHAT_TOKENS_PER_MESSAGE = 3  # role and separators of each chat message (OpenAI's documented count)
CHAT_REPLY_PRIMING = 3  # the assistant header the template appends
# pydantic's lax mode, as vLLM's request models read their fields: "5", 5.0 and true are the int 5, 5 and 1; "0.5"
# the float 0.5; "true", "yes", "1", 1 and 1.0 the bool true ("abc", 5.5 and 2 are refused)
LAX_INT = TypeAdapter(int)
LAX_FLOAT = TypeAdapter(float)
LAX_BOOL = TypeAdapter(bool)


class ApiError(Exception):
    """An error answered as ``{"error": {...}}`` with this HTTP status."""

    TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError", 413: "RequestTooLargeError",
             500: "InternalServerError", 503: "ServiceUnavailableError"}

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def response(self) -> Response:
        body = {"error": {"message": self.message, "type": self.TYPES.get(self.status, "BadRequestError"),
                          "param": self.param, "code": self.status}}
        # ASCII JSON: a message quoting the client's text (a lone surrogate included) always encodes
        return Response(json.dumps(body).encode("ascii"), status_code=self.status, media_type="application/json")


def text_tokens(text: str, chars_per_token: float) -> int:
    """Tokens of a text without a tokenizer: ceil(characters / chars_per_token)."""
    return math.ceil(len(text) / chars_per_token)


@dataclass
class Job:
    """A validated request: what to submit and how to answer."""

    chat: bool
    prompt_tokens: int
    max_tokens: int | None
    stream: bool
    include_usage: bool
    seed: int
    ignore_eos: bool = False
    min_tokens: int = 0  # vLLM's min_tokens: no end of sequence before this many tokens


# ---------------------------------------------------------------------- parsing and validation
def shown(v: Any) -> str:
    """A client's value quoted in an error message: short, ASCII, and never recursing into a nested value (a
    body may nest lists hundreds deep)."""
    if isinstance(v, list):
        return f"a list of {len(v)} items"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, str) and len(v) > 80:
        v = v[:80] + "..."
    return json.dumps(v)[:100]


# vLLM's ranges of the sampling options: the emulator does not sample, but refuses what vLLM refuses (400)
SAMPLING_RANGES: tuple[tuple[str, Callable[[float], bool], str], ...] = (
    ("temperature", lambda v: 0 <= v <= 2, "in [0, 2]"),
    ("top_p", lambda v: 0 < v <= 1, "in (0, 1]"),
    ("min_p", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("presence_penalty", lambda v: -2 <= v <= 2, "in [-2, 2]"),
    ("frequency_penalty", lambda v: -2 <= v <= 2, "in [-2, 2]"),
    ("repetition_penalty", lambda v: v > 0, "greater than zero"),
)


def lax(body: dict[str, Any], key: str, adapter: TypeAdapter[Any], want: str, nullable: bool = True) -> Any:
    """``body[key]`` read as vLLM's pydantic model reads it (lax mode); None when missing, or null where vLLM's
    field is optional (``nullable``); else a 400 naming the field and what it must be."""
    v = body.get(key)
    if key not in body or v is None and nullable:
        return None
    try:
        return adapter.validate_python(v)
    except ValidationError:
        raise ApiError(400, f"`{key}` must be {want}, got {shown(v)}", key) from None


def check_sampling(body: dict[str, Any], max_tokens: int | None) -> tuple[int | None, int]:
    """Check the sampling options as vLLM does (400 naming the field); returns (the client's seed or None,
    ``min_tokens``: the least the answer has, whatever a sampled length says)."""
    for key, ok, want in SAMPLING_RANGES:
        v = lax(body, key, LAX_FLOAT, f"a number {want}")
        if v is not None and (not math.isfinite(v) or not ok(v)):
            raise ApiError(400, f"`{key}` must be a number {want}, got {shown(body[key])}", key)
    want = "0 or -1 (disable), or at least 1"
    top_k = lax(body, "top_k", LAX_INT, want)
    if top_k is not None and top_k < -1:
        raise ApiError(400, f"`top_k` must be {want}, got {shown(body['top_k'])}", "top_k")
    stop = body.get("stop")
    if stop is not None and not (isinstance(stop, str) and stop or isinstance(stop, list)
                                 and all(isinstance(x, str) and x for x in stop)):
        raise ApiError(400, f"`stop` must be a non-empty string or a list of non-empty strings, got {shown(stop)}",
                       "stop")
    seed = lax(body, "seed", LAX_INT, "a 64-bit integer")
    if seed is not None and not -(2**63) <= seed < 2**63:
        raise ApiError(400, f"`seed` must be a 64-bit integer, got {shown(body['seed'])}", "seed")
    cap = "" if max_tokens is None else f" and at most max_tokens={max_tokens}"
    want = f"an integer >= 0{cap}"
    min_tokens = lax(body, "min_tokens", LAX_INT, want, nullable=False)  # vLLM's `min_tokens: int = 0`
    if min_tokens is None:
        min_tokens = 0
    if min_tokens < 0 or max_tokens is not None and min_tokens > max_tokens:
        raise ApiError(400, f"`min_tokens` must be {want}, got {shown(body['min_tokens'])}", "min_tokens")
    return (None if seed == -1 else seed), min_tokens


def _int_or_none(body: dict[str, Any], key: str) -> int | None:
    v = lax(body, key, LAX_INT, "a positive integer")
    if v is not None and v < 1:
        raise ApiError(400, f"`{key}` must be a positive integer, got {shown(body[key])}", key)
    return v


def check_n(n: Any, chat: bool) -> None:
    """``n`` as vLLM takes it: its pydantic models declare ``n: int`` (completions; null refused) and
    ``n: int | None`` (chat; null is 1), validated in pydantic's lax mode (true, 1.0 and "1" are 1), then at least 1.
    The emulator serves one choice only, so anything else than 1 is a 400."""
    if n is None and chat:
        return
    try:
        v = LAX_INT.validate_python(n)
    except ValidationError:
        raise ApiError(400, f"`n` must be an integer, got {shown(n)}", "n") from None
    if v < 1:
        raise ApiError(400, f"`n` must be at least 1, got {v}", "n")
    if v != 1:
        raise ApiError(400, f"`n` must be 1 (the emulator returns one choice per request), got {shown(n)}", "n")


def _common(body: dict[str, Any], served: str, chat: bool) -> tuple[bool, bool]:
    """Check the fields both endpoints share; returns (stream, include_usage)."""
    model = body.get("model")  # optional, as in vLLM: missing, null or "" means the served model
    if model is not None and not isinstance(model, str):
        raise ApiError(400, f"`model` must be a string, got {shown(model)}", "model")
    if model and model != served:
        raise ApiError(404, f"The model `{model[:200]}` does not exist.", "model")
    stream = bool(lax(body, "stream", LAX_BOOL, "a boolean"))
    if "n" in body:
        check_n(body["n"], chat)
    so = body.get("stream_options")
    if so and not body.get("stream"):  # vLLM tests the raw values: `{}` passes, and so does `"stream": "false"`
        raise ApiError(400, "Stream options can only be defined when `stream=True`.", "stream_options")
    include_usage = False
    if so is not None:
        bad = ApiError(400, "`stream_options` must be an object like {\"include_usage\": true}", "stream_options")
        if not isinstance(so, dict):
            raise bad
        try:  # vLLM's StreamOptions: `include_usage: bool | None = True`, so `{}` asks for usage
            include_usage = stream and ("include_usage" not in so or bool(lax(so, "include_usage", LAX_BOOL, "")))
        except ApiError:
            raise bad from None
    return stream, include_usage


def _prompt_tokens(prompt: Any, cpt: float, vocab: int | None = None) -> int:
    """Token count of a completions prompt: token ids count exactly, text approximately. An id past the model's
    vocabulary is refused in vLLM's words (a real server cannot embed it)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        if not prompt:
            raise ApiError(400, "`prompt` must not be empty", "prompt")
        return text_tokens(prompt, cpt)
    if isinstance(prompt, list) and prompt and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                   for x in prompt):
        top = max(prompt)
        if vocab is not None and top >= vocab:
            raise ApiError(400, f"Token id {shown(top)} is out of vocabulary (the model's {vocab} tokens)", "prompt")
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(x, str | list) for x in prompt):
        raise ApiError(400, "batched prompts (a list of several prompts) are not supported by the emulator; send "
                       "one request per prompt", "prompt")
    raise ApiError(400, "`prompt` must be a non-empty string or a non-empty list of token ids (integers >= 0)",
                   "prompt")


def _message_text(i: int, m: Any) -> str:
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise ApiError(400, f"`messages[{i}]` must be an object with a string `role`", "messages")
    c = m.get("content")
    if c is None or isinstance(c, str):
        return c or ""
    if isinstance(c, list):
        parts = []
        for j, p in enumerate(c):
            if not isinstance(p, dict) or not isinstance(p.get("type"), str):
                raise ApiError(400, f"`messages[{i}].content` parts must be objects with a `type`", "messages")
            if p["type"] != "text":  # an image or audio would be prefilled too: not counted is not emulated
                raise ApiError(400, f"`messages[{i}].content[{j}]` is of type {shown(p['type'])}: the emulator "
                                    "serves text only (content parts of type \"text\")", "messages")
            if not isinstance(p.get("text"), str):
                raise ApiError(400, f"`messages[{i}].content` text parts need a string `text`", "messages")
            parts.append(p["text"])
        return "".join(parts)
    raise ApiError(400, f"`messages[{i}].content` must be a string, a list of content parts or null", "messages")


def parse_job(body: dict[str, Any], chat: bool, opts: EmulatorOptions, vocab: int | None = None) -> Job:
    """Validate a completions or chat body (400 / 404 naming the field) into a :class:`Job`; ``vocab``: the
    model's vocabulary size, that token ids must stay below."""
    stream, include_usage = _common(body, opts.name, chat)
    cpt = opts.chars_per_token
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise ApiError(400, "`messages` is required: a non-empty list of {\"role\", \"content\"} objects",
                           "messages")
        texts = [_message_text(i, m) for i, m in enumerate(msgs)]
        prompt = text_tokens("".join(texts), cpt) + CHAT_TOKENS_PER_MESSAGE * len(msgs) + CHAT_REPLY_PRIMING
        max_tokens = _int_or_none(body, "max_completion_tokens")
        if max_tokens is None:
            max_tokens = _int_or_none(body, "max_tokens")
        key: Any = texts
    else:
        if "prompt" not in body:
            raise ApiError(400, "`prompt` is required: a string or a list of token ids", "prompt")
        prompt = _prompt_tokens(body["prompt"], cpt, vocab)
        max_tokens = _int_or_none(body, "max_tokens")
        if max_tokens is None:
            max_tokens = COMPLETIONS_DEFAULT_MAX_TOKENS
        key = body["prompt"]
    user_seed, min_tokens = check_sampling(body, max_tokens)
    seed = request_seed(opts.seed, chat, key, max_tokens, user_seed)
    ignore_eos = bool(lax(body, "ignore_eos", LAX_BOOL, "a boolean", nullable=False))  # vLLM's `ignore_eos: bool`
    return Job(chat, prompt, max_tokens, stream, include_usage, seed, ignore_eos, min_tokens)


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The body as a JSON object; 413 past ``limit`` bytes (checked while reading), 400 if not an object."""
    cl = request.headers.get("content-length")
    if cl is not None and cl.isdigit() and int(cl) > limit:
        raise ApiError(413, f"request body of {cl} bytes is larger than the limit of {limit} bytes")
    buf = bytearray()
    async for chunk in request.stream():
        buf += chunk
        if len(buf) > limit:
            raise ApiError(413, f"request body is larger than the limit of {limit} bytes")
    try:
        body = json.loads(bytes(buf))
    except RecursionError:
        raise ApiError(400, "the request body is not valid JSON: it is nested too deeply") from None
    except ValueError as e:  # malformed, not UTF-8, or an integer of more than 4300 digits
        raise ApiError(400, f"the request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(body).__name__}")
    return body
