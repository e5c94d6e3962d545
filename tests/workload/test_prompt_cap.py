"""A trace's ``max_prompt``: rows with longer prompts are skipped and counted, so the trace presets run on the default
cluster (Llama-2-7B, a 4,096-token context) and say what they left out."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from llmsim.errors import ConfigError
from llmsim.perf.models import get_model
from llmsim.resources import conf_dir
from llmsim.simulation.from_config import run_from_config
from llmsim.workload import AzureTrace, Empirical, PromptCapped, build_workload
from llmsim.workload.transforms import PROMPT_OVER_MAX
from tests.helpers import SHARED, shared_present

AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:40.0000000,5000,4\n"
    "2023-11-16 18:15:46.0000000,374,44\n"
    "2023-11-16 18:15:50.0000000,4096,109\n"
    "2023-11-16 18:15:51.0000000,4095,31\n"
    "2023-11-16 18:16:01.0000000,1000,1\n"
)
TRACE_KINDS = ("azure", "burstgpt", "csv", "mooncake")


def azure(tmp_path: Path, **over) -> dict:
    path = tmp_path / "azure.csv"
    path.write_text(AZURE)
    return {"kind": "azure", "path": str(path), **over}


def test_longer_prompts_are_skipped_counted_and_ids_renumbered(tmp_path: Path) -> None:
    wl = build_workload(azure(tmp_path, max_prompt=4095), seed=0)
    reqs = list(wl)
    assert [(r.id, r.prompt_tokens) for r in reqs] == [(0, 374), (1, 4095), (2, 1000)]
    assert [r.arrival for r in reqs] == [6.0, 11.0, 21.0]  # the trace's clock is kept (t = 0 at its first row)
    assert wl.stats.skipped == {PROMPT_OVER_MAX: 2} and wl.stats.rows_read == 5 and wl.stats.yielded == 3


def test_the_cap_comes_after_the_window_and_before_the_limit(tmp_path: Path) -> None:
    """The window is cut in trace time first; ``max_requests`` then counts requests that are simulated."""
    wl = build_workload(azure(tmp_path, max_prompt=4095, window=[5, 30], max_requests=2), seed=0)
    assert [(r.id, r.arrival, r.prompt_tokens) for r in wl] == [(0, 1.0, 374), (1, 6.0, 4095)]
    assert wl.stats.skipped == {"outside_window": 1, PROMPT_OVER_MAX: 1}
    assert wl.stats.stopped == "max_requests"


def test_no_cap_by_default_and_null_keeps_every_row(tmp_path: Path) -> None:
    for cfg in (azure(tmp_path), azure(tmp_path, max_prompt=None)):
        assert [r.prompt_tokens for r in build_workload(cfg, seed=0)] == [5000, 374, 4096, 4095, 1000]


def test_a_cap_that_leaves_nothing_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^max_prompt: every request .* longer than 100 tokens \(5 skipped\)"):
        list(build_workload(azure(tmp_path, max_prompt=100), seed=0))
    with pytest.raises(ConfigError, match=r"^max_prompt: expected an integer >= 1"):
        PromptCapped(AzureTrace(tmp_path / "azure.csv"), 0)


@pytest.mark.parametrize("bad,needle", [
    (0, "workload.max_prompt: expected a value >= 1, got 0"),
    (1.5, "workload.max_prompt: expected an integer, got 1.5"),
    (True, "workload.max_prompt: expected a number, not a boolean"),
])
def test_bad_caps_name_the_key(tmp_path: Path, bad: object, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        build_workload(azure(tmp_path, max_prompt=bad), seed=0)
    assert needle in str(e.value)


def test_every_trace_preset_fits_the_default_model() -> None:
    """conf/workload's trace presets cap prompts at what the default cluster serves: a prompt plus one output token
    within the model's context (the engine refuses a prompt of max_model_len tokens)."""
    d = conf_dir()
    defaults = yaml.safe_load((d / "config.yaml").read_text())["defaults"]
    cluster = next(x["cluster"] for x in defaults if isinstance(x, dict) and "cluster" in x)
    models = {i.get("model", "llama-2-7b") for i in yaml.safe_load((d / "cluster" / f"{cluster}.yaml").read_text())
              ["instances"]}
    longest = min(get_model(m).max_position for m in models) - 1
    presets = {p.stem: yaml.safe_load(p.read_text()) for p in sorted((d / "workload").glob("*.yaml"))}
    traces = {name: cfg for name, cfg in presets.items() if cfg["kind"] in TRACE_KINDS}
    assert {"azure_conv", "azure_code", "mooncake", "burstgpt"} <= set(traces)
    assert all(cfg.get("max_prompt") == longest for cfg in traces.values()), {n: c.get("max_prompt")
                                                                               for n, c in traces.items()}


def _compose(overrides: list[str]) -> dict:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return OmegaConf.to_container(compose(config_name="config", overrides=overrides), resolve=True)


@pytest.mark.parametrize("preset,cut", [
    ("azure_conv", "workload.window=[0,120]"),
    ("azure_code", "workload.window=[0,60]"),
    ("mooncake", "workload.max_requests=100"),
])
def test_trace_presets_run_on_the_default_cluster_and_say_what_they_skipped(preset: str, cut: str,
                                                                            tmp_path: Path) -> None:
    """``llmsim workload=<preset>`` with nothing else: no unservable request stops the run (sim.on_unservable is
    still ``error``), and the skipped rows are in the summary and the run's note."""
    if not shared_present():
        pytest.skip(f"../shared is absent ({SHARED}): the trace presets replay its files")
    cfg = _compose([f"workload={preset}", cut, "output.plots=false", "output.progress=false"])
    assert cfg["sim"]["on_unservable"] == "error" and cfg["cluster"] == _compose([])["cluster"]
    res = run_from_config(cfg, out_dir=tmp_path / "run")
    skipped = res.summary["workload_skipped"]
    assert skipped.get(PROMPT_OVER_MAX, 0) > 0 and res.summary["dropped"] == 0 and res.summary["completed"] > 0
    assert any(PROMPT_OVER_MAX in note for note in res.notes)


def test_a_length_table_s_skipped_rows_are_in_the_summary_and_the_note(tmp_path: Path) -> None:
    """Empirical lengths drop a table's zero-length rows (counted in ``Empirical.skipped``); the run used to say
    nothing of them, unlike a trace's skipped rows."""
    table = tmp_path / "lengths.csv"
    table.write_text("num_prefill_tokens,num_decode_tokens\n5,5\n0,4\n7,0\n6,6\n")
    cfg = _compose(["output.plots=false", "output.progress=false", "output.save=false", "workload.num_requests=8",
                    "~workload.prompt", "~workload.output", f"+workload.lengths={{dist: empirical, path: {table}}}"])
    res = run_from_config(cfg)
    assert res.summary["lengths_skipped"] == {"zero_prompt_tokens": 1, "zero_output_tokens": 1}
    assert res.summary["workload_skipped"] == {}  # every request drawn was simulated
    assert ("length table rows skipped (counted, not sampled): {'zero_prompt_tokens': 1, 'zero_output_tokens': 1}"
            in res.notes)


@pytest.mark.parametrize("preset", ["azure_conv", "azure_code", "mooncake", "burstgpt"])
def test_trace_presets_take_the_common_keys_as_plain_overrides(preset: str) -> None:
    """``llmsim workload=mooncake workload.window=[0,1200]`` as for the Azure presets: the mooncake preset lacked
    ``window`` and ``rate_scale``, so Hydra refused the override (``+workload.window`` was needed)."""
    cfg = _compose([f"workload={preset}", "workload.window=[0,1200]", "workload.rate_scale=2",
                    "workload.max_requests=5"])["workload"]
    assert (cfg["window"], cfg["rate_scale"], cfg["max_requests"]) == ([0, 1200], 2, 5)


def test_a_length_table_s_clipped_rows_are_counted_and_said(tmp_path: Path) -> None:
    """Empirical lengths clip a table's values to prompt/output min/max: a ShareGPT table with prompt_max 4096 samples
    a fifth of its prompts at exactly 4,096 tokens, and the run said nothing of it."""
    table = tmp_path / "lengths.csv"
    table.write_text("num_prefill_tokens,num_decode_tokens\n5,5\n9000,4\n7,3\n6,600\n8000,2\n")
    emp = Empirical(table, prompt_max=4000, output_min=3, output_max=500)
    assert emp.clipped == {"prompt_max": 2, "output_min": 1, "output_max": 1}
    assert emp.describe()["clipped"] == emp.clipped
    cfg = _compose(["output.plots=false", "output.progress=false", "output.save=false", "workload.num_requests=8",
                    "~workload.prompt", "~workload.output",
                    f"+workload.lengths={{dist: empirical, path: {table}, prompt_max: 4000}}"])
    res = run_from_config(cfg)
    assert res.summary["lengths_clipped"] == {"prompt_max": 2}
    assert ("length table rows beyond its bounds (sampled at the bound): {'prompt_max': 2} of 5 rows"
            in res.notes), res.notes
    assert "lengths_clipped" not in run_from_config(_compose(["output.save=false", "output.plots=false",
                                                              "output.progress=false",
                                                              "workload.num_requests=8"])).summary
