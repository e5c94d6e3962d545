"""The live router's config file (YAML), validated like every llmsim config group (:class:`llmsim.schema.Schema`):
an error is one line naming the key and what was expected, e.g. ``router.yaml: backends[0].url: expected an
http:// or https:// URL, got 'ftp://x'``.

    backends:                      # the OpenAI-compatible servers (vLLM, llmsim-emulate, ...) it routes over
      - {name: a100-0, url: http://10.0.0.5:8000, model: llama-3.1-8b, gpu: a100-80gb}
      - {name: a100-1, url: http://10.0.0.6:8000, model: meta-llama/Llama-3.1-8B-Instruct, policy_model: llama-3.1-8b}
    policy: {heuristic: jsq}       # any llmsim router (kwargs: {...}), or {onnx: <export dir>} (llmsim-export)
    scrape_interval_s: 0.5
    port: 8000
    limits: {max_in_flight: 1024, max_queue: 256, max_wait_s: 10, max_body_bytes: 4194304}
    timeouts: {connect_s: 2, first_token_s: 60, request_s: 600, scrape_s: 2}
    retries: 2
    health: {interval_s: 1, eject_after: 2, readmit_after: 1}

Bearer tokens: ``api_key`` (clients must send it), a backend's ``api_key`` (sent to that backend). Values of
the form ``env:NAME`` are read from the environment variable ``NAME`` (keys stay out of config files).
Loading needs no optional dependency: the CLI checks a config before it needs the ``serve`` extra.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator, model_validator

from llmsim.errors import ConfigError, load_yaml_file
from llmsim.schema import Int, NonNegInt, PosFloat, PosInt, Schema

SECRET_PREFIX = "env:"  # an api_key of the form env:NAME is read from the environment


class BackendConfig(Schema):
    """One backend (``backends[i]``): where it is and, when it cannot say, what it serves."""

    where: ClassVar[str] = "backends[]"
    name: Annotated[str, Field(min_length=1)]
    url: str
    model: str | None = None  # served model name; default: read from the backend's /v1/models
    policy_model: str | None = None  # the llmsim model name a trained policy knows this backend by; default: model
    gpu: str | None = None
    api_key: str | None = None
    max_num_seqs: PosInt = 256  # vLLM's default; the engine argument is not in /metrics

    @field_validator("url")
    @classmethod
    def http_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("an http:// or https:// URL")
        return v.rstrip("/")


class PolicyConfig(Schema):
    """``policy``: what decides, an llmsim router by name or an exported policy's directory."""

    where: ClassVar[str] = "policy"
    heuristic: str | None = None
    onnx: str | None = None
    kwargs: dict[str, Any] = Field(default_factory=dict)
    seed: NonNegInt = 0

    @model_validator(mode="after")
    def exactly_one(self) -> PolicyConfig:
        if (self.heuristic is None) == (self.onnx is None):
            raise ValueError("exactly one of 'heuristic: <llmsim router name>' or 'onnx: <export dir>'")
        return self


class Limits(Schema):
    """``limits``: what the router accepts at once before answering 429 / 503 / 413 / 400."""

    where: ClassVar[str] = "limits"
    max_in_flight: PosInt = 1024  # requests being answered at once; more get 429
    max_queue: NonNegInt = 256  # requests a policy holds (WAIT) at once; more get 429
    max_wait_s: PosFloat = 10.0  # longest a held request waits for a decision; then 503
    max_body_bytes: Annotated[Int, Field(ge=1024)] = 4 * 1024 * 1024
    max_prompt_tokens: PosInt | None = None  # estimated; default: the largest backend context


class Timeouts(Schema):
    """``timeouts`` towards the backends, seconds."""

    where: ClassVar[str] = "timeouts"
    connect_s: PosFloat = 2.0
    first_token_s: PosFloat = 60.0  # until the response headers / first streamed token
    request_s: PosFloat = 600.0  # whole request
    scrape_s: PosFloat = 2.0


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
    model_name: str = "llmsim-router"  # the name clients may ask for to let the policy choose any backend
    api_key: str | None = None
    retries: NonNegInt = 2
    chars_per_token: PosFloat = 4.0  # prompt-length estimate for text prompts (no tokenizer)
    limits: Limits = Field(default_factory=Limits)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    health: Health = Field(default_factory=Health)

    @field_validator("backends")
    @classmethod
    def some_backends_named_apart(cls, v: list[BackendConfig]) -> list[BackendConfig]:
        if not v:
            raise ValueError("at least one backend")
        names = [b.name for b in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"backends with unique names (repeated: {dup})")
        return v


def read_secret(v: str | None, key: str) -> str | None:
    """``v`` itself, or for ``env:NAME`` the environment variable NAME (ConfigError naming ``key`` if unset)."""
    if v is None or not v.startswith(SECRET_PREFIX):
        return v
    name = v[len(SECRET_PREFIX):]
    if name not in os.environ:
        raise ConfigError(f"{key}: environment variable {name!r} is not set")
    return os.environ[name]


def parse_config(data: Any, where: str = "router config") -> RouterConfig:
    """A RouterConfig from a mapping; a one-line ConfigError naming ``where`` and the first bad key otherwise."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with 'backends' and 'policy', got {type(data).__name__}")
    try:
        cfg = RouterConfig.parse(data)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    check_static_tpot(cfg.policy, [b.policy_model or b.model for b in cfg.backends], where)
    backends = [b.model_copy(update={"api_key": read_secret(b.api_key, f"{where}: backends[{i}].api_key")})
                for i, b in enumerate(cfg.backends)]
    return cfg.model_copy(update={"backends": backends, "api_key": read_secret(cfg.api_key, f"{where}: api_key")})


def check_static_tpot(policy: PolicyConfig, models: list[str | None], where: str = "router config") -> None:
    """RouteBalance behind the live router needs ``policy.kwargs.static_tpot_ms``: a finite decode time per token
    (ms, > 0) for every backend's model. The router knows no backend's GPU, so it cannot fall back to a profile,
    and an idle backend has no step time yet. Models not yet known (read from /v1/models at start) are None
    here (or ""); the gateway checks them again after discovery (``Decider.check_backends``)."""
    if policy.heuristic != "routebalance":
        return
    key = f"{where}: policy.kwargs.static_tpot_ms"
    table = policy.kwargs.get("static_tpot_ms")
    if table is None:
        raise ConfigError(f"{key}: missing; policy routebalance needs the decode time per token (ms, > 0) of every "
                          "backend model, e.g. static_tpot_ms: {llama-3.1-8b: 8.0}")
    if not isinstance(table, dict) or not table:
        raise ConfigError(f"{key}: expected a mapping of model name to ms per token (> 0), got {table!r}")
    for k, v in table.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ConfigError(f"{key}.{k}: expected a finite number of ms per token > 0, got {v!r}")
    missing = sorted({m for m in models if m and m not in table})
    if missing:
        raise ConfigError(f"{key}: no entry for backend model(s) {missing}; add them (ms per token > 0); it has "
                          f"{sorted(table)}")


def load_config(path: str | Path, port: int | None = None) -> RouterConfig:
    """The router config in the YAML file ``path`` (``port`` overrides the file's)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such router config file")
    cfg = parse_config(load_yaml_file(p), str(p))
    return cfg if port is None else cfg.model_copy(update={"port": port})
