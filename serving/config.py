"""The live router's config file (YAML), validated like every llmsim config group (:class:`llmsim.schema.Schema`):
an error is one line naming the key and what was expected, e.g. ``router.yaml: backends[0].url: expected an
http:// or https:// URL, got 'ftp://x'``.

    backends:                      # the OpenAI-compatible servers (vLLM, llmsim-emulate, ...) it routes over
      - {name: a100-0, url: http://10.0.0.5:8000, model: llama-3.1-8b, gpu: a100-80gb}
      - {name: a100-1, url: http://10.0.0.6:8000, model: meta-llama/Llama-3.1-8B-Instruct, policy_model: llama-3.1-8b}
      - {name: h100-0, url: http://10.0.0.7:8000, model: my-finetune, gpu: h100,
         llmsim_model: /models/my-finetune/config.json, kv_cache_dtype: fp8}  # what model-aware policies price
    policy: {heuristic: jsq}       # any llmsim router (kwargs: {...}), {onnx: <export dir>} (llmsim-export) or
                                   # {onnx: zoo:<name>} (a router of llmsim's zoo, docs/zoo.md)
    scrape_interval_s: 0.5
    port: 8000
    limits: {max_in_flight: 1024, max_queue: 256, max_wait_s: 10, max_body_bytes: 4194304}
    timeouts: {connect_s: 2, first_token_s: 60, request_s: 600, scrape_s: 2}
    retries: 2
    health: {interval_s: 1, eject_after: 2, readmit_after: 1}

Secrets: ``api_key`` (clients must send it: every route but ``/health`` then needs it), a backend's ``api_key``
(sent to that backend) and a backend URL's ``user:password@`` (sent as HTTP basic authentication, then removed
from the URL, so that no log line or answer that names the backend can carry it). Values of the form ``env:NAME``
are read from the environment variable ``NAME`` (keys stay out of config files). An empty key is an error, never
"no authentication": leave the key out for that. :func:`redact` is the one helper that takes secrets out of any
text the router shows. Loading needs no optional dependency: the CLI checks a config before it needs the
``serve`` extra.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, ClassVar
from urllib.parse import unquote, urlsplit

from pydantic import Field, PrivateAttr, field_validator, model_validator

from llmsim.emulator.engine import check_key as check_bearer_key
from llmsim.emulator.model_names import looks_like_path, model_source
from llmsim.errors import ConfigError, load_yaml_file
from llmsim.perf.hardware import get_gpu
from llmsim.perf.kv_cache_dtype import model_with_kv_cache_dtype
from llmsim.perf.models import ModelSpec, config_path, get_model
from llmsim.schema import Int, KvCacheDtype, NonNegInt, PosFloat, PosInt, Schema

SECRET_PREFIX = "env:"  # an api_key of the form env:NAME is read from the environment
HIDDEN = "***"
MIN_SECRET_CHARS = 4  # shorter secrets are not searched for in texts (they would garble them)
# a URL's user:password@ and its query values, wherever a URL sits in a text (greedy: up to the last '@')
_USERINFO = re.compile(r"(://)[^\s'\"<>]*@")
_QUERY_VALUE = re.compile(r"([?&][^\s'\"<>=&#]+=)[^\s'\"<>&#]+")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` safe to show outside the process: any URL's ``user:password@`` and query values, and every string
    of ``secrets`` (api keys, passwords: :func:`config_secrets`), replaced by ``***``."""
    text = _QUERY_VALUE.sub(rf"\1{HIDDEN}", _USERINFO.sub(rf"\1{HIDDEN}@", text))
    for s in secrets:
        if len(s) >= MIN_SECRET_CHARS and s in text:
            text = text.replace(s, HIDDEN)
    return text


def url_problem(url: str) -> str | None:
    """What is wrong with a backend's base URL (None: nothing): http or https, a host, a port in 1-65535, no
    whitespace, no query string or fragment (the router appends ``/v1/...`` to it)."""
    if not url or any(c.isspace() or not c.isprintable() for c in url):
        return "an http:// or https:// URL without spaces or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:  # its text may quote a password: described, not echoed
        why = "a port in 1-65535" if "out of range" in str(e) else (
            "its IPv6 host in closed [brackets]" if "IPv6" in str(e) else "a numeric port")
        return f"an http:// or https:// URL with {why}"
    if parts.scheme not in ("http", "https"):
        return "an http:// or https:// URL"
    if not parts.hostname:
        return "an http:// or https:// URL with a host"
    if port == 0:
        return "an http:// or https:// URL with a port in 1-65535"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "a base URL without a ?query or #fragment (the router appends /v1/... to it)"
    return None


def url_identity(url: str) -> tuple[str, str, int, str]:
    """What makes two backend URLs the same server: scheme, host, port (the scheme's default if none), path."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/")


def non_empty(v: str | None) -> str | None:
    """A key given as ``''`` is refused where it is read (it would turn authentication off)."""
    if v == "":
        raise ValueError("a non-empty key (an empty key would turn authentication off; leave the key out for none)")
    return v


def check_key(v: str | None, key: str) -> str | None:
    """``v`` if it is a key HTTP can carry (:func:`llmsim.emulator.engine.check_key`: ConfigError naming ``key``)."""
    check_bearer_key(v, key)
    return v


class BackendConfig(Schema):
    """One backend (``backends[i]``): where it is and, when it cannot say, what it serves. A ``user:password@`` in
    ``url`` becomes the backend's basic authentication and leaves the URL (``url`` is then the URL without it)."""

    where: ClassVar[str] = "backends[]"
    name: Annotated[str, Field(min_length=1)]
    url: str
    model: str | None = None  # served model name; default: read from the backend's /v1/models
    policy_model: str | None = None  # the llmsim model name a trained policy knows this backend by; default: model
    gpu: str | None = None
    api_key: str | None = Field(default=None, repr=False)
    max_num_seqs: PosInt = 256  # vLLM's default; the engine argument is not in /metrics
    # what model-aware policies price it as (InstanceState.model_spec), as cluster.instances[].model / kv_cache_dtype
    llmsim_model: Annotated[str, Field(min_length=1)] | None = None  # registered name, HF id or config.json path
    kv_cache_dtype: KvCacheDtype = "auto"  # vLLM's --kv-cache-dtype of the backend
    _basic: str | None = PrivateAttr(default=None)  # base64 "user:password" from the URL, for the basic auth header
    _spec: ModelSpec | None = PrivateAttr(default=None)  # llmsim_model / kv_cache_dtype resolved (load_model_spec)

    @field_validator("api_key")
    @classmethod
    def non_empty_key(cls, v: str | None) -> str | None:
        return non_empty(v)

    @field_validator("url")
    @classmethod
    def http_url(cls, v: str) -> str:
        problem = url_problem(v)
        if problem is not None:
            raise ValueError(problem)
        return v.rstrip("/")

    def model_post_init(self, context: Any) -> None:
        """Move ``user:password@`` out of the URL: sent as a header, never written where a URL is shown."""
        parts = urlsplit(self.url)
        if parts.username is None and parts.password is None:
            return
        user_pass = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        self._basic = base64.b64encode(user_pass.encode()).decode("ascii")
        self.url = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()

    @property
    def has_url_credentials(self) -> bool:
        return self._basic is not None

    @property
    def secrets(self) -> tuple[str, ...]:
        """What authenticates the router to this backend, in every form a text may carry it: the api key, the URL's
        password and its basic token (base64 of ``user:password``)."""
        if self._basic is None:
            return (self.api_key,) if self.api_key else ()
        password = base64.b64decode(self._basic).decode().partition(":")[2]
        return tuple(s for s in (self.api_key, password, self._basic) if s)

    @property
    def model_spec(self) -> ModelSpec | None:
        """The model as llmsim prices this backend (its ``InstanceState.model_spec``); None: policies look its
        model name up in llmsim's registry."""
        return self._spec

    def load_model_spec(self, where: str, key: str) -> None:
        """Resolve ``llmsim_model`` (else, for a ``kv_cache_dtype``, the configured model name) as the simulator
        resolves ``cluster.instances[].model``, its kv_cache_dtype applied; a model, GPU or dtype that cannot be
        priced is one ConfigError line naming the file (``where``), the backend (``key``: ``backends[i]``) and the
        key."""
        if self.llmsim_model is None and self.kv_cache_dtype == "auto":
            return
        at = f"{where}: {key}"
        tag = f" (backend {self.name!r})"
        name = self.llmsim_model or self.policy_model or self.model
        if name is None:
            raise ConfigError(f"{at}.kv_cache_dtype{tag}: expected llmsim_model (or model) beside it: the model "
                              f"whose KV cache is {self.kv_cache_dtype}")
        if self.llmsim_model is not None and looks_like_path(name) and config_path(name) is None:
            raise ConfigError(f"{at}.llmsim_model{tag}: {name}: no such file or folder (expected a config.json or "
                              "the folder holding one; relative paths start at the working directory)")
        try:
            spec = get_model(model_source(name))  # (a plain name is never read from the working directory)
        except ConfigError as e:
            if self.llmsim_model is not None:
                raise ConfigError(f"{at}.llmsim_model{tag}: {e}") from None
            raise ConfigError(f"{at}.kv_cache_dtype{tag}: its model {name!r} is not one llmsim knows; give "
                              f"{key}.llmsim_model (a registered name or the path of its config.json)") from None
        try:
            get_gpu(self.gpu or "")
        except ConfigError as e:
            raise ConfigError(f"{at}.gpu{tag}: expected the GPU it runs on, to price its llmsim_model / "
                              f"kv_cache_dtype on ({e})") from None
        self._spec = model_with_kv_cache_dtype(spec, self.kv_cache_dtype)

    def auth_headers(self) -> dict[str, str]:
        """What authenticates the router to this backend: its bearer ``api_key``, or the URL's basic credentials."""
        if self.api_key:
            return {"Authorization": f"Bearer {self.api_key}"}
        return {"Authorization": f"Basic {self._basic}"} if self._basic else {}


class PolicyConfig(Schema):
    """``policy``: what decides, an llmsim router by name or an exported policy's directory (``zoo:<name>``: a
    router shipped in llmsim's zoo)."""

    where: ClassVar[str] = "policy"
    heuristic: str | None = None
    onnx: Annotated[str, Field(min_length=1)] | None = None
    kwargs: dict[str, Any] = Field(default_factory=dict)
    seed: NonNegInt = 0

    @model_validator(mode="after")
    def exactly_one(self) -> PolicyConfig:
        """One policy; its seed and export directory given once, by their own keys (in kwargs as well, the router
        would be given two values of one argument)."""
        if (self.heuristic is None) == (self.onnx is None):
            raise ValueError("exactly one of 'heuristic: <llmsim router name>' or 'onnx: <export dir>'")
        for key, own in (("seed", "policy.seed"), ("path", "policy.onnx")):
            if key in self.kwargs and (key == "seed" or self.onnx is not None):
                raise ValueError(f"kwargs without '{key}' (give it as {own})")
        return self


class Limits(Schema):
    """``limits``: what the router accepts at once before answering 429 / 503 / 413 / 400."""

    where: ClassVar[str] = "limits"
    max_in_flight: PosInt = 1024  # requests being answered at once; more get 429
    max_queue: NonNegInt = 256  # requests a policy holds (WAIT) at once; more get 429
    max_wait_s: PosFloat = 10.0  # longest a held request waits for a decision; then 503
    max_body_bytes: Annotated[Int, Field(ge=1024)] = 4 * 1024 * 1024
    max_prompt_tokens: PosInt | None = None  # estimated; default: the largest backend context
    header_read_s: PosFloat = 10.0  # a client's request headers, from its first byte; then the connection is closed
    body_read_s: PosFloat = 30.0  # a client's request body, from its headers; then the connection is closed
    idle_s: PosFloat = 75.0  # an idle keep-alive client connection (longer than clients' pools keep theirs)


class Timeouts(Schema):
    """``timeouts`` towards the backends, seconds."""

    where: ClassVar[str] = "timeouts"
    connect_s: PosFloat = 2.0
    first_token_s: PosFloat = 60.0  # until the response headers / first streamed token
    request_s: PosFloat = 600.0  # whole request
    scrape_s: PosFloat = 2.0
    stall_s: PosFloat = 10.0  # a stream's longest gap between two tokens; then it ends with an SSE error event


class Health(Schema):
    """``health``: when a backend is ejected and when it is readmitted."""

    where: ClassVar[str] = "health"
    interval_s: PosFloat = 1.0
    eject_after: PosInt = 2  # consecutive failed checks (or one refused connection) eject a backend
    readmit_after: PosInt = 1  # consecutive good checks readmit it


class RouterConfig(Schema):
    """The whole router config file."""

    backends: list[BackendConfig]
    policy: PolicyConfig
    scrape_interval_s: PosFloat = 0.5
    host: str = "127.0.0.1"
    port: Annotated[Int, Field(ge=0, le=65535)] = 8000
    model_name: Annotated[str, Field(min_length=1)] = "llmsim-router"  # lets the policy choose any backend
    api_key: str | None = Field(default=None, repr=False)
    openapi: bool = False  # serve /openapi.json and /docs (behind api_key when there is one)
    retries: NonNegInt = 2
    chars_per_token: PosFloat = 4.0  # prompt-length estimate for text prompts (no tokenizer)
    limits: Limits = Field(default_factory=Limits)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    health: Health = Field(default_factory=Health)

    @field_validator("backends")
    @classmethod
    def some_backends_apart(cls, v: list[BackendConfig]) -> list[BackendConfig]:
        """At least one; no two with one name (metrics label them by it) or one URL (one server counted twice)."""
        if not v:
            raise ValueError("at least one backend")
        names = [b.name for b in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"backends with unique names (repeated: {dup})")
        seen: dict[tuple[str, str, int, str], int] = {}
        for i, b in enumerate(v):
            j = seen.setdefault(url_identity(b.url), i)
            if j != i:
                raise ValueError(f"backends with distinct URLs (backends[{j}] and backends[{i}] are both "
                                 f"{redact(b.url)})")
        return v

    @field_validator("host")
    @classmethod
    def listen_address(cls, v: str) -> str:
        return check_host(v)

    @field_validator("api_key")
    @classmethod
    def non_empty_key(cls, v: str | None) -> str | None:
        return non_empty(v)


def check_host(v: str) -> str:
    """An address to listen on: a name or IP without spaces or control characters (ValueError otherwise)."""
    if not v or any(c.isspace() or not c.isprintable() for c in v):
        raise ValueError("an address to listen on, such as 127.0.0.1 or 0.0.0.0 (no spaces)")
    return v


def read_secret(v: str | None, key: str) -> str | None:
    """``v`` itself, or for ``env:NAME`` the environment variable NAME; checked as a bearer token (ConfigError
    naming ``key`` if the variable is unset or empty, or the key malformed; never showing the value)."""
    if v is not None and v.startswith(SECRET_PREFIX):
        name = v[len(SECRET_PREFIX):]
        if not name:
            raise ConfigError(f"{key}: expected env:<variable name>, got 'env:'")
        if not os.environ.get(name):
            state = "empty" if name in os.environ else "not set"
            raise ConfigError(f"{key}: environment variable {name!r} is {state} (an empty key would turn "
                              "authentication off; leave the key out for none)")
        v = os.environ[name]
    return check_key(v, key)


def config_secrets(cfg: RouterConfig) -> tuple[str, ...]:
    """Every secret value of a loaded config (api keys, URL passwords and their basic tokens), each also as a JSON
    string writes it (a key with a quote or a backslash): what :func:`redact` must take out of any text."""
    keys = [cfg.api_key, *(s for b in cfg.backends for s in b.secrets)]
    plain = [k for k in keys if k]
    escaped = [json.dumps(k)[1:-1] for k in plain]
    return tuple(dict.fromkeys([*plain, *(e for e in escaped if e not in plain)]))


def raw_secrets(data: dict[str, Any]) -> list[str]:
    """The secret values of a config not yet validated (api keys, URL passwords), for redacting its errors."""
    found = [data.get("api_key")]
    backends = data.get("backends")
    for b in backends if isinstance(backends, list) else []:
        if isinstance(b, dict):
            found.append(b.get("api_key"))
            url = b.get("url")
            if isinstance(url, str) and "@" in url:
                userinfo = url.partition("://")[2].rpartition("@")[0]
                found += [userinfo, userinfo.partition(":")[2] or userinfo]  # all of it; the password
    return sorted({s for s in found if isinstance(s, str) and s and not s.startswith(SECRET_PREFIX)},
                  key=len, reverse=True)


def parse_config(data: Any, where: str = "router config") -> RouterConfig:
    """A RouterConfig from a mapping; a one-line ConfigError naming ``where`` and the first bad key otherwise (its
    text redacted: an error never shows a key or a password)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with 'backends' and 'policy', got {type(data).__name__}")
    try:
        cfg = RouterConfig.parse(data)
    except ConfigError as e:
        raise ConfigError(redact(f"{where}: {e}", raw_secrets(data))) from None
    backends = []
    for i, b in enumerate(cfg.backends):
        key = read_secret(b.api_key, f"{where}: backends[{i}].api_key")
        if key is not None and b.has_url_credentials:
            raise ConfigError(f"{where}: backends[{i}]: expected either an api_key or user:password@ in the url, "
                              "not both (each is an Authorization header)")
        b.load_model_spec(where, f"backends[{i}]")
        backends.append(b.model_copy(update={"api_key": key}))
    check_static_tpot(cfg.policy, [b.policy_model or b.model for b in backends if b.model_spec is None], where)
    return cfg.model_copy(update={"backends": backends, "api_key": read_secret(cfg.api_key, f"{where}: api_key")})


def check_static_tpot(policy: PolicyConfig, models: list[str | None], where: str = "router config") -> None:
    """RouteBalance behind the live router needs ``policy.kwargs.static_tpot_ms``: a finite decode time per token
    (ms, > 0) for the model of every backend in ``models``: those not priced from their profile (a backend's
    ``llmsim_model`` / ``kv_cache_dtype`` with its ``gpu``): an idle backend has no step time yet, and a model
    name alone may price the wrong model. Models not yet known (read from /v1/models at start) are None here
    (or ""); the gateway checks them again after discovery (``Decider.check_backends``)."""
    if policy.heuristic != "routebalance":
        return
    key = f"{where}: policy.kwargs.static_tpot_ms"
    table = policy.kwargs.get("static_tpot_ms")
    if table is None and not models:  # every backend priced from its profile
        return
    if table is None:
        raise ConfigError(f"{key}: missing; policy routebalance needs the decode time per token (ms, > 0) of every "
                          "backend model, e.g. static_tpot_ms: {llama-3.1-8b: 8.0} (or the backend's llmsim_model "
                          "and gpu, to price it from its profile)")
    if not isinstance(table, dict) or not table:
        raise ConfigError(f"{key}: expected a mapping of model name to ms per token (> 0), got {table!r}")
    for k, v in table.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ConfigError(f"{key}.{k}: expected a finite number of ms per token > 0, got {v!r}")
    missing = sorted({m for m in models if m and m not in table})
    if missing:
        raise ConfigError(f"{key}: no entry for backend model(s) {missing}; add them (ms per token > 0); it has "
                          f"{sorted(table)}")


def load_config(path: str | Path, port: int | None = None, host: str | None = None) -> RouterConfig:
    """The router config in the YAML file ``path`` (``port`` / ``host`` override the file's: ``--port``,
    ``--host``); a one-line ConfigError naming the file or the option otherwise."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such router config file")
    try:
        p.read_bytes().decode("utf-8")
    except OSError as e:
        raise ConfigError(f"{p}: cannot read the router config ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: expected a UTF-8 text file, got byte 0x{e.object[e.start]:02x} at offset "
                          f"{e.start}") from None
    data = load_yaml_file(p)  # (a key given twice in one mapping is refused there, naming its line)
    cfg = parse_config(data, str(p))
    if port is not None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfigError(f"--port: expected a TCP port 0-65535 (0: any free one), got {port!r}")
        cfg = cfg.model_copy(update={"port": port})
    if host is not None:
        try:
            cfg = cfg.model_copy(update={"host": check_host(host)})
        except ValueError as e:
            raise ConfigError(f"--host: expected {e}, got {host!r}") from None
    return cfg
