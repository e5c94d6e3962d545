"""What the live router's model-aware policies (qlm, shepherd, routebalance) price each backend as: the backend's
model name looked up in llmsim's registry, or what its config says it serves (``llmsim_model``,
``kv_cache_dtype``), carried to the policies in ``InstanceState.model_spec`` as the simulator carries it."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path

import pytest
import yaml

pytest.importorskip("fastapi", reason="the serving extra is not installed: pip install 'llmsim[serve]'")

from llmsim.emulator.model_names import registered  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from llmsim.perf import models  # noqa: E402
from llmsim.perf.kv_cache_dtype import model_with_kv_cache_dtype  # noqa: E402
from llmsim.perf.models import get_model  # noqa: E402
from llmsim.request import Request  # noqa: E402
from llmsim.routing.base import instance_model  # noqa: E402
from llmsim.serving import pricing  # noqa: E402
from llmsim.serving.config import load_config, parse_config  # noqa: E402
from llmsim.serving.gateway import Gateway  # noqa: E402
from llmsim.serving.tracker import Backend  # noqa: E402
from tests.helpers import REPO  # noqa: E402
from tests.perf.helpers import tiny  # noqa: E402

pytestmark = pytest.mark.timeout(60)

TOO_LONG = "m" * 300  # over the file system's 255-byte file name limit


def config(*backends: dict, policy: str = "qlm") -> dict:
    return {"backends": [{"name": f"b{i}", "url": f"http://127.0.0.1:{9001 + i}", "gpu": "a100-80gb", **b}
                         for i, b in enumerate(backends)], "policy": {"heuristic": policy}}


def gateway(cfg: dict, models: list[str]) -> Gateway:
    """A gateway whose backends are up and serve ``models`` (as discovery would leave them), without a network."""
    gw = Gateway(parse_config(cfg))
    for b, m in zip(gw.backends, models, strict=True):
        b.model, b.up = m, True
    return gw


@pytest.mark.parametrize("policy", ["qlm", "shepherd"])
def test_a_backend_model_name_no_file_system_takes_is_a_counted_fallback_not_a_500(policy) -> None:
    """A backend may call its model anything (vLLM: the path it loaded); a name the registry lookup cannot even
    probe as a path (over NAME_MAX) fell out of the policy as an OSError: every request an HTTP 500."""
    gw = gateway(config({}, {}, policy=policy), [TOO_LONG, TOO_LONG])
    assert gw.decide(Request(0, 0.0, 100, 10), [0, 1], held=False) in (0, 1)
    assert gw.metrics.registry.get_sample_value("llmsim_router_unpriced_decisions_total") == 1


def unpriced(gw: Gateway) -> float:
    return gw.metrics.registry.get_sample_value("llmsim_router_unpriced_decisions_total")


@pytest.mark.parametrize("policy", ["qlm", "shepherd"])
def test_a_backend_model_name_is_resolved_once_per_name_not_probed_per_decision(policy, monkeypatch) -> None:
    """An unknown served name was looked up as a path (and in the hub cache) by the policy at each decision, once
    per tensor-parallel degree tried: disk probes per request. It is resolved once per backend and model name (the
    failure kept), again only when the backend's model changes; a plain name is never looked up as a path."""
    probes: list[str] = []
    real = pricing.model_source

    def source(name: str) -> str:
        if not registered(name):  # (a registered name is a dictionary lookup)
            probes.append(name)
        return real(name)

    monkeypatch.setattr(pricing, "model_source", source)
    monkeypatch.setattr(models, "config_path", lambda name: pytest.fail(f"{name} looked up as a path"))
    gw = gateway(config({}, {}, policy=policy), ["llama-3.1-8b", "my-finetune"])
    for i in range(5):
        assert gw.decide(Request(i, 0.0, 100, 10), [0, 1], held=False) in (0, 1)
    assert probes == ["my-finetune"] and unpriced(gw) == 5
    gw.backends[1].model = "my-finetune-v2"  # (readmitted, serving another model)
    gw.decide(Request(5, 0.0, 100, 10), [0, 1], held=False)
    gw.decide(Request(6, 0.0, 100, 10), [0, 1], held=False)
    assert probes == ["my-finetune", "my-finetune-v2"] and unpriced(gw) == 7
    assert gw.metrics.registry.get_sample_value("llmsim_router_policy_errors_total") == 0


def test_a_backend_the_policy_cannot_price_is_said_once_at_start_naming_it_and_the_keys(caplog) -> None:
    """qlm / shepherd over a backend they cannot price decided nothing on it: every decision fell back to the least
    loaded backend. The router says so at start, one line per such backend (which, why, the keys that fix it),
    and counts the fallbacks and flags the backend in its metrics; later decisions log nothing more."""
    cfg = parse_config(config({"model": "llama-3.1-8b"}, {"model": "my-finetune"}, {"model": "llama-3.1-8b",
                                                                                  "gpu": None}))
    gw = Gateway(cfg)

    async def run() -> None:
        await gw.start()  # (nothing listens: the backends are down, their models known from the config)
        await gw.stop()

    with caplog.at_level(logging.WARNING, logger="llmsim.serving.gateway"):
        asyncio.run(run())
        lines = [r.getMessage() for r in caplog.records if "cannot price" in r.getMessage()]
        assert len(lines) == 2, lines
        assert lines[0].startswith("backend b1 (model 'my-finetune'): policy qlm cannot price it (llmsim does not "
                                   "know the model 'my-finetune'")
        assert lines[1].startswith("backend b2 (model 'llama-3.1-8b'): policy qlm cannot price it (no gpu in its "
                                   "config")
        assert all("give backends[" in x and "gpu (the GPU it runs on) and llmsim_model" in x for x in lines)
        for b in gw.backends:
            b.up = True
        for i in range(3):
            gw.decide(Request(i, 0.0, 100, 10), [0, 1, 2], held=False)
        assert len([r for r in caplog.records if "cannot price" in r.getMessage()]) == 2
    reg = gw.metrics.registry
    assert unpriced(gw) == 3 and reg.get_sample_value("llmsim_router_policy_errors_total") == 0
    assert [reg.get_sample_value("llmsim_router_backend_unpriced", {"backend": f"b{i}"}) for i in range(3)] == [0, 1, 1]
    assert gw.decide(Request(3, 0.0, 100, 10), [0], held=False) == 0  # (only priced backends healthy: the policy)
    assert unpriced(gw) == 3


def test_a_file_path_a_backend_serves_under_is_never_read_one_its_config_names_is(tmp_path, monkeypatch,
                                                                                 caplog) -> None:
    """vLLM's served name is by default the path it loaded: a backend naming any path (another file of the
    router's machine) had the router open it as a config.json at each decision, and log a field of it. A served
    path is refused unread (the fix named); the same path in the config (model / llmsim_model) is read."""
    cfg_json = tmp_path / "config.json"
    cfg_json.write_text(Path(tiny("tiny-llama")).read_text())
    probes: list[str] = []
    real = models.config_path
    monkeypatch.setattr(models, "config_path", lambda name: probes.append(name) or real(name))
    served = gateway(config({}, {}), [str(cfg_json), str(cfg_json)])
    for i in range(3):
        served.decide(Request(i, 0.0, 100, 10), [0, 1], held=False)
    assert probes == [] and unpriced(served) == 3
    assert f"its served name {str(cfg_json)!r} is a file path, and the router reads no file" in caplog.text
    configured = gateway(config({"model": str(cfg_json)}, {"model": str(cfg_json)}), [str(cfg_json)] * 2)
    configured.decide(Request(0, 0.0, 100, 10), [0, 1], held=False)
    assert unpriced(configured) == 0 and probes and set(probes) == {str(cfg_json)}  # (looked at each time it is named)


def test_routebalance_over_a_readmitted_backend_serving_a_model_without_a_prior(caplog) -> None:
    """routebalance prices a backend without a static_tpot_ms entry from its profile: a backend readmitted with
    a model it has no entry for and cannot price is an unpriced backend like qlm's (said once, counted), not a
    policy error at each decision; one with an entry needs no profile."""
    cfg = config({"model": "my-finetune"}, {"model": "my-finetune"}, policy="routebalance")
    cfg["policy"]["kwargs"] = {"static_tpot_ms": {"my-finetune": 9.0}}
    gw = gateway(cfg, ["my-finetune", "my-finetune"])
    gw.decide(Request(0, 0.0, 100, 10), [0, 1], held=False)
    assert unpriced(gw) == 0
    gw.backends[1].model = "other-finetune"
    gw.backends[1].cfg = gw.backends[1].cfg.model_copy(update={"model": None})
    for i in range(1, 4):
        gw.decide(Request(i, 0.0, 100, 10), [0, 1], held=False)
    assert unpriced(gw) == 3 and gw.metrics.registry.get_sample_value("llmsim_router_policy_errors_total") == 0
    assert caplog.text.count("policy routebalance cannot price it") == 1
    assert "or a policy.kwargs.static_tpot_ms entry for its model" in caplog.text


def test_an_unregistered_model_priced_by_its_config_is_decided_by_the_policy(tmp_path, caplog) -> None:
    """A fine-tune served under its own name: by name, qlm cannot price it (every decision a counted policy error,
    sent to the least loaded backend, logged once with the key that fixes it); given its config.json, the policy
    decides on it."""
    cfg_json = tmp_path / "config.json"
    cfg_json.write_text(Path(tiny("tiny-llama")).read_text())
    by_name = gateway(config({}, {}), ["my-finetune", "my-finetune"])
    by_name.decide(Request(0, 0.0, 100, 10), [0, 1], held=False)
    assert by_name.metrics.registry.get_sample_value("llmsim_router_unpriced_decisions_total") == 1
    assert "know the model 'my-finetune'" in caplog.text and "llmsim_model (a registered name" in caplog.text
    by_config = gateway(config({"llmsim_model": str(cfg_json)}, {"llmsim_model": str(tmp_path)}),
                        ["my-finetune", "my-finetune"])
    by_config.decide(Request(0, 0.0, 100, 10), [0, 1], held=False)
    assert by_config.metrics.registry.get_sample_value("llmsim_router_policy_errors_total") == 0
    assert by_config.metrics.registry.get_sample_value("llmsim_router_unpriced_decisions_total") == 0
    specs = [b.instance_state().model_spec for b in by_config.backends]
    assert specs[0] == specs[1] and specs[0].hidden == 64 and specs[0].max_position == 512


def test_an_fp8_kv_cache_and_a_longer_context_are_the_backends_own(tmp_path) -> None:
    """The simulator prices an instance as loaded (its config's context length, its kv_cache_dtype): so does the
    live router, in the model_spec of each backend's state, never the registry's model of the same name."""
    hf = json.loads(Path(tiny("tiny-llama")).read_text())
    hf["max_position_embeddings"] = 4096
    (tmp_path / "long.json").write_text(json.dumps(hf))
    cfg = parse_config(config({"model": "llama-3.1-8b", "kv_cache_dtype": "fp8"},
                              {"llmsim_model": "Qwen/Qwen3-32B", "kv_cache_dtype": "fp8_e5m2"},
                              {"llmsim_model": str(tmp_path / "long.json")}, {"model": "llama-3.1-8b"}))
    states = [Backend(i, b, up=True).instance_state() for i, b in enumerate(cfg.backends)]
    assert states[0].model_spec == model_with_kv_cache_dtype(get_model("llama-3.1-8b"), "fp8")
    assert states[0].model_spec.kv_bytes_per_token * 2 == get_model("llama-3.1-8b").kv_bytes_per_token
    assert states[1].model_spec == model_with_kv_cache_dtype(get_model("qwen3-32b"), "fp8_e5m2")
    assert states[2].model_spec.max_position == 4096 and states[2].model_spec.kv_dtype_bytes == 0
    assert states[3].model_spec is None  # nothing said: policies look its name up, as before
    assert instance_model(states[0]) == states[0].model_spec and instance_model(states[3]) == "llama-3.1-8b"


@pytest.mark.parametrize(("backend", "want"), [
    ({"llmsim_model": "models/ft/config.json"}, r"backends\[1\]\.llmsim_model \(backend 'b1'\): "
                                                r"models/ft/config.json: no such file or folder"),
    ({"llmsim_model": "no-such-model"}, r"backends\[1\]\.llmsim_model \(backend 'b1'\): unknown model "
                                        r"'no-such-model': give a registered name"),
    ({"llmsim_model": "BAD_JSON"}, r"backends\[1\]\.llmsim_model \(backend 'b1'\): HF config .*: not JSON"),
    ({"kv_cache_dtype": "fp8"}, r"backends\[1\]\.kv_cache_dtype \(backend 'b1'\): expected llmsim_model \(or "
                                r"model\) beside it"),
    ({"kv_cache_dtype": "fp8", "model": "my-finetune"}, r"backends\[1\]\.kv_cache_dtype \(backend 'b1'\): its "
                                                        r"model 'my-finetune' is not one llmsim knows; give "
                                                        r"backends\[1\]\.llmsim_model"),
    ({"kv_cache_dtype": "fp4", "model": "llama-3.1-8b"}, r"backends\[1\]\.kv_cache_dtype: expected one of auto, "
                                                         r"bfloat16, float16, fp8"),
    ({"llmsim_model": "llama-3.1-8b", "gpu": None}, r"backends\[1\]\.gpu \(backend 'b1'\): expected the GPU it "
                                                    r"runs on.*unknown GPU ''"),
    ({"llmsim_model": "llama-3.1-8b", "gpu": "gtx-9"}, r"backends\[1\]\.gpu \(backend 'b1'\): .*unknown GPU 'gtx-9'"),
    ({"llmsim_modl": "llama-3.1-8b"}, r"backends\[1\]: unknown key 'llmsim_modl' \(did you mean 'llmsim_model'\?\)"),
])
def test_what_a_backend_is_priced_as_is_checked_in_one_line_naming_it(tmp_path, monkeypatch, backend, want) -> None:
    monkeypatch.chdir(tmp_path)  # (relative paths start at the working directory)
    (tmp_path / "bad.json").write_text("{not json")
    if backend.get("llmsim_model") == "BAD_JSON":
        backend = {"llmsim_model": str(tmp_path / "bad.json")}
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config({}, backend)))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert re.match(f"{re.escape(str(path))}: {want}", str(e.value)), str(e.value)
    assert "\n" not in str(e.value) and "Traceback" not in str(e.value)


def test_routebalance_prices_backends_with_a_model_from_their_profile_without_a_table() -> None:
    """RouteBalance needs a decode time per token for every backend: a hand-written static_tpot_ms entry, or
    (now that the router knows what a backend serves and on which GPU) its profile."""
    priced = {"model": "my-finetune", "llmsim_model": "llama-3.1-8b", "kv_cache_dtype": "fp8"}
    gw = gateway(config(priced, priced, policy="routebalance"), ["my-finetune", "my-finetune"])
    gw.decider.check_backends(["my-finetune"] * 2, [])  # (what the gateway's start checks after discovery)
    gw.decide(Request(0, 0.0, 100, 10), [0, 1], held=False)
    assert gw.metrics.registry.get_sample_value("llmsim_router_policy_errors_total") == 0
    assert gw.decider.router.priors.prior_s(gw.backends[0].instance_state()) > 0
    mixed = config(priced, {"model": "other-finetune"}, policy="routebalance")
    with pytest.raises(ConfigError, match=r"static_tpot_ms: missing; .* \(or the backend's llmsim_model and gpu"):
        parse_config(mixed)
    mixed["policy"]["kwargs"] = {"static_tpot_ms": {"llama-3.1-8b": 8.0}}
    with pytest.raises(ConfigError, match=r"no entry for backend model\(s\) \['other-finetune'\]"):
        parse_config(mixed)


def test_the_docs_example_prices_its_backend_as_it_says(tmp_path) -> None:
    """docs/serving.md's example backend, its config.json folder made real: an fp8-cache spec of that config."""
    text = (REPO / "docs" / "serving.md").read_text()
    sec = text[text.index("**What a backend is priced as.**"):]
    block = re.search(r"```yaml\n(.*?)```", sec, re.S).group(1)
    (tmp_path / "config.json").write_text(Path(tiny("tiny-llama")).read_text())
    data = yaml.safe_load(block.replace("/models/my-finetune", str(tmp_path)))
    cfg = parse_config({**data, "policy": {"heuristic": "qlm"}})
    spec = Backend(0, cfg.backends[0]).instance_state().model_spec
    assert spec == model_with_kv_cache_dtype(get_model(tiny("tiny-llama")), "fp8") and spec.kv_dtype_bytes == 1


def test_a_plain_model_name_is_never_read_from_the_working_directory(tmp_path, monkeypatch) -> None:
    """A backend serving ``my-finetune`` had the router read a file of that name in the folder it was started in
    as the model's config.json (the backend chose which file the router opened); so did ``llmsim_model:
    my-finetune``. Only an explicit path is read; an unknown plain name is the one-line unknown-model error."""
    (tmp_path / "my-finetune").write_text(Path(tiny("tiny-llama")).read_text())
    monkeypatch.chdir(tmp_path)
    gw = gateway(config({}), ["my-finetune"])
    p = gw.backends[0].pricing
    assert (p.priced, p.spec) == (False, None) and "llmsim does not know the model 'my-finetune'" in p.problem
    with pytest.raises(ConfigError, match=r"^router config: backends\[0\]\.llmsim_model \(backend 'b0'\): "
                                          r"unknown model 'my-finetune': give a registered name .*plain name is never"):
        parse_config(config({"llmsim_model": "my-finetune"}))
    assert parse_config(config({"llmsim_model": "./my-finetune"})).backends[0].model_spec.name == "tiny-llama"


@pytest.mark.parametrize("down", [{"gpu": None}, {"gpu": "tpu-x9"}, {"model": "my-finetune", "gpu": None}])
def test_a_down_backend_qlm_cannot_price_is_no_candidate_not_a_failed_decision(down) -> None:
    """qlm priced every backend, a down one it cannot price (no gpu, an unknown GPU) included: every decision
    failed (a policy error, the request sent to the least loaded backend). A down backend is not a candidate: the
    decisions are qlm's, the same as without it; once it is healthy the router's unpriced rule applies (counted)."""
    priced = {"model": "llama-3.1-8b"}
    gw = gateway(config(priced, priced, down), ["llama-3.1-8b", "llama-3.1-8b", down.get("model", "llama-3.1-8b")])
    gw.backends[2].up = False
    ref = gateway(config(priced, priced), ["llama-3.1-8b", "llama-3.1-8b"])
    reqs = [Request(i, 0.0, 100 + 900 * (i % 3), 10 + 50 * (i % 2)) for i in range(8)]
    assert [gw.decide(r, [0, 1], held=False) for r in reqs] == [ref.decide(r, [0, 1], held=False) for r in reqs]
    reg = gw.metrics.registry
    assert reg.get_sample_value("llmsim_router_policy_errors_total") == 0 and unpriced(gw) == 0
    assert not reg.get_sample_value("llmsim_router_fallbacks_total")
    gw.backends[2].up = True
    assert gw.decide(Request(8, 0.0, 100, 10), [0, 1, 2], held=False) in (0, 1, 2)
    assert unpriced(gw) == 1 and reg.get_sample_value("llmsim_router_policy_errors_total") == 0
