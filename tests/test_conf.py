"""Every shipped config in conf/ composes through Hydra, passes the schema and runs a short simulation or episode;
every workload preset runs from the command line as documented (``workload=<name>``), and switching kinds with
``workload.kind=...`` is one clear line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from llmsim.errors import ConfigError
from llmsim.resources import conf_dir
from llmsim.simulation.from_config import run_from_config
from llmsim.workload import build_workload
from tests.helpers import REPO, SHARED, shared_present
from tests.workload.helpers import write_burstgpt

CONF = REPO / "conf"
# presets whose data is not in ../shared: the tests write a fixture in the upstream format and pass its path
FIXTURE_WORKLOADS = {"burstgpt": lambda tmp: write_burstgpt(tmp / "BurstGPT_1.csv")}


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _reads_shared(name: str) -> bool:
    """A preset whose trace is read from ../shared/traces (skipped, with the reason, when that is absent)."""
    path = yaml.safe_load((CONF / "workload" / f"{name}.yaml").read_text()).get("path")
    return isinstance(path, str) and "LLMSIM_TRACES" in path


def _skip_without_data(name: str) -> None:
    if _reads_shared(name) and not shared_present():
        pytest.skip(f"workload preset {name} replays a trace from ../shared/traces, absent here ({SHARED})")


def _compose(overrides: list[str]) -> dict:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)


def _small(cfg: dict) -> dict:
    wl = cfg["workload"]
    if wl["kind"] in ("synthetic", "burstgpt_like"):
        wl["num_requests"] = 40
    else:
        wl["max_requests"] = 40
    cfg["output"] = {"save": False, "plots": False, "progress": False, "format": "csv"}
    cfg["sim"]["on_unservable"] = "drop"  # traces hold a few prompts longer than some contexts (counted)
    return cfg


CASES = ([("cluster", o) for o in _options("cluster")] + [("engine", o) for o in _options("engine")]
         + [("workload", o) for o in _options("workload")] + [("policy", o) for o in _options("policy")])


@pytest.mark.parametrize("group,option", CASES, ids=[f"{g}={o}" for g, o in CASES])
def test_shipped_config_runs(group: str, option: str, tmp_path: Path) -> None:
    overrides = [f"{group}={option}"]
    if group == "workload":
        _skip_without_data(option)
        if option in FIXTURE_WORKLOADS:
            overrides.append(f"workload.path={FIXTURE_WORKLOADS[option](tmp_path)}")
    if (group, option) == ("policy", "onnx"):  # an exported policy for the default cluster (4 x llama-2-7b)
        pytest.importorskip("torch", reason="building an export to route with needs the rl extra")
        from llmsim.agents.export import export
        from llmsim.agents.imitate import demo_checkpoint

        overrides.append(f"policy.kwargs.path={export(demo_checkpoint('ddqn_flat', tmp_path), check_steps=0)}")
    cfg = _small(_compose(overrides))
    res = run_from_config(cfg)
    s = res.summary
    assert s["completed"] + s["dropped"] == 40
    assert s["completed"] > 0


def test_every_workload_preset_has_a_test_path() -> None:
    """A new preset either reads ../shared, needs no data, or gets a fixture here (so it is never left untested)."""
    for name in _options("workload"):
        path = yaml.safe_load((CONF / "workload" / f"{name}.yaml").read_text()).get("path", "no path key")
        assert _reads_shared(name) or name in FIXTURE_WORKLOADS or path == "no path key", name


@pytest.mark.parametrize("name", _options("workload"))
def test_workload_preset_runs_as_documented(name: str, tmp_path: Path) -> None:
    """The Python equivalent of ``llmsim workload=<name> ++workload.max_requests=50 output.plots=false
    hydra.run.dir=<tmp>`` (plus ``workload.path=...`` where the data is not in ../shared)."""
    _skip_without_data(name)
    overrides = [f"workload={name}", "++workload.max_requests=50", "output.plots=false", "output.progress=false",
                 "sim.on_unservable=drop"]
    if name in FIXTURE_WORKLOADS:
        overrides.append(f"workload.path={FIXTURE_WORKLOADS[name](tmp_path)}")
    res = run_from_config(_compose(overrides), out_dir=tmp_path / "run")
    assert res.summary["completed"] + res.summary["dropped"] == 50 and res.summary["completed"] > 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["completed"] == res.summary["completed"]


NO_DATA = [n for n in _options("workload") if not _reads_shared(n) and n not in FIXTURE_WORKLOADS]


@pytest.mark.parametrize("name", NO_DATA)
def test_a_preset_without_data_fits_the_default_cluster(name: str) -> None:
    """``llmsim workload=<name>`` on the default cluster serves every request (no on_unservable=drop needed): a
    preset's prompts leave room for one output token in the default Llama-2-7B's 4,096-token context."""
    cfg = _compose([f"workload={name}"])
    if {i.get("model") for i in cfg["cluster"]["instances"]} != {"llama-2-7b"}:
        pytest.skip("the default cluster is no longer 4 x llama-2-7b: update this test's context")
    prompts = [r.prompt_tokens for r in build_workload(cfg["workload"], cfg["seed"])]
    assert len(prompts) == cfg["workload"]["num_requests"] and max(prompts) <= 4095, (name, max(prompts))


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmsim", *args, "output.plots=false", f"hydra.run.dir={cwd}/run"],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("preset", ["burstgpt", "burstgpt_like"])
def test_burstgpt_presets_from_the_command_line(tmp_path: Path, preset: str) -> None:
    if preset == "burstgpt":  # the _3 layout, gzip-compressed, both log types given as a list
        path = write_burstgpt(tmp_path / "BurstGPT_3.csv.gz", layout="3", gz=True)
        extra = [f"workload.path={path}", "workload.log_type=[API log,Conversation log]"]
    else:
        extra = ["workload.log_type=API log", "+workload.api.cv=2.0"]
    p = _cli([f"workload={preset}", "++workload.max_requests=50", *extra], tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["completed"] == 50


@pytest.mark.parametrize("args,needles", [
    (["workload=burstgpt"], ["workload.path: missing", "https://github.com/HPMLL/BurstGPT/releases",
                             "workload.path=/path/to/BurstGPT_1.csv"]),
    (["workload.kind=burstgpt"], ["workload: unknown keys ['arrival',", "for kind 'burstgpt'", "workload.kind",
                                  "workload=burstgpt", "~workload.rate"]),
])
def test_cli_workload_mistakes_are_one_clear_line(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    p = _cli(args, tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("llmsim: error: "), p.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("kind", ["burstgpt", "burstgpt_like", "azure", "mooncake", "csv"])
def test_switching_kind_on_the_default_preset_names_the_way_out(kind: str) -> None:
    cfg = _compose([f"workload.kind={kind}"])
    with pytest.raises(ConfigError) as e:
        run_from_config(cfg)
    msg = str(e.value)
    assert msg.startswith("workload: unknown keys") and f"for kind {kind!r}" in msg and "\n" not in msg
    presets = [n for n in _options("workload") if yaml.safe_load((CONF / "workload" / f"{n}.yaml").read_text())
               .get("kind") == kind]
    assert all(f"workload={p}" in msg for p in presets) and "~workload.arrival" in msg


@pytest.mark.parametrize("preset", ["azure_conv", "mooncake"])
def test_a_synthetic_key_added_to_a_trace_preset_is_a_typo_hint(preset: str) -> None:
    """``num_requests`` on a trace preset (whose limit is ``max_requests``) used to be explained as a kind switched
    on the command line, which the user had not done."""
    with pytest.raises(ConfigError, match=r"^workload: unknown key 'num_requests' \(did you mean 'max_requests'\?\)"):
        run_from_config(_compose([f"workload={preset}", "++workload.num_requests=5"]))


def test_switching_kind_works_once_the_other_keys_are_dropped() -> None:
    cfg = _compose(["workload.kind=burstgpt_like", "~workload.arrival", "~workload.prompt", "~workload.output",
                    "workload.num_requests=30"])
    cfg["output"] = {"save": False, "plots": False, "progress": False, "format": "csv"}
    assert run_from_config(cfg).summary["completed"] == 30


@pytest.mark.parametrize("name", _options("env"))
def test_shipped_env_config_steps(name: str) -> None:
    from llmsim.envs.testbeds import make_from_config

    cfg = OmegaConf.to_container(OmegaConf.load(CONF / "env" / f"{name}.yaml"), resolve=True)
    cfg["num_requests"] = 30
    if isinstance(cfg.get("workload"), dict) and "num_requests" in cfg["workload"]:
        cfg["workload"]["num_requests"] = 30
    env = make_from_config(cfg)
    obs, info = env.reset(seed=0)
    done = False
    steps = 0
    while not done:
        a = int(env.unwrapped.action_masks().argmax())
        obs, r, term, trunc, info = env.step(a)
        done = term or trunc
        steps += 1
    assert steps >= 1
    s = info["summary"]
    assert s["completed"] + s["dropped"] == 30


@pytest.mark.parametrize("name", _options("reward"))
def test_shipped_reward_configs_build(name: str) -> None:
    from llmsim.envs.rewards import Reward, make_reward

    cfg = OmegaConf.to_container(OmegaConf.load(CONF / "reward" / f"{name}.yaml"), resolve=True)
    assert isinstance(make_reward(cfg), Reward)


@pytest.mark.parametrize("option", _options("engine"))
def test_every_engine_key_is_set_from_the_command_line_as_documented(option: str) -> None:
    """Each engine preset names every engine key, so ``engine.<key>=...`` overrides it (a key missing from the
    preset is Hydra's 'Could not override' unless written ``+engine.<key>``); prefix caching can be turned off."""
    from llmsim.engine.config import EngineConfig

    keys = set(yaml.safe_load((CONF / "engine" / f"{option}.yaml").read_text()))
    assert keys == set(EngineConfig.model_fields)
    cfg = _compose([f"engine={option}", "engine.enable_prefix_caching=false"])
    assert cfg["engine"]["enable_prefix_caching"] is False
