"""Conservation on the saved files: requests.csv (or .parquet) + dropped.csv name every request exactly once,
and summary.json's counts agree with them, whatever dropped the requests (router, unservable, KV, never
routed). The user reads the files, not the in-memory tables, so that is where it is checked."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.routing import DROP, WAIT, Router
from llmsim.simulation.from_config import run_from_config
from llmsim.testing import LinearProfile, requests
from tests.helpers import REPO


def composed(overrides: list[str]) -> dict:
    """The plain config the ``llmsim`` CLI would run with these overrides (Hydra's compose over conf/)."""
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)


def check_saved(out: Path, ids: list[int], fmt: str = "csv") -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Every id in exactly one of the two files, and summary.json counting the same rows."""
    done = pd.read_parquet(out / "requests.parquet") if fmt == "parquet" else pd.read_csv(out / "requests.csv")
    dropped = pd.read_csv(out / "dropped.csv")
    summary = json.loads((out / "summary.json").read_text())
    seen = [*done["id"].tolist(), *dropped["id"].tolist()]
    assert len(seen) == len(set(seen)), "a request appears twice across requests and dropped"
    assert sorted(seen) == sorted(ids)
    assert summary["num_requests"] == len(ids)
    assert summary["completed"] == len(done)
    assert summary["dropped"] == len(dropped)
    assert summary["dropped_by_reason"] == dropped["reason"].value_counts().to_dict()
    return done, dropped, summary


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_cli_run_with_unservable_and_kv_drops(tmp_path, fmt):
    """sim.on_unservable=drop: prompts past max_model_len or the KV cache, and requests outgrowing it."""
    cfg = composed(["workload.num_requests=300", "workload.prompt.max=6000", "workload.prompt.sigma=0.9",
                    "engine.num_gpu_blocks=220", "engine.max_num_seqs=32", "sim.on_unservable=drop",
                    "output.plots=false", f"output.format={fmt}", "seed=3"])
    run_from_config(cfg, tmp_path)
    done, dropped, _ = check_saved(tmp_path, list(range(300)), fmt)
    reasons = set(dropped["reason"])
    assert {"prompt_exceeds_max_model_len", "prompt_exceeds_kv_capacity"} <= reasons, reasons
    assert len(done) > 100


class _DropWaitRouter(Router):
    """Drops every third request, holds every fourth in the central queue once, routes the rest in turn."""

    name = "drop_wait_test"

    def __init__(self, n_instances: int, never_route: set[int] | None = None) -> None:
        super().__init__(0)
        self.n = n_instances
        self.held: set[int] = set()
        self.never_route = never_route or set()

    def route(self, req, view) -> int:
        if req.id in self.never_route:
            return WAIT
        if req.id % 3 == 0:
            return DROP
        if req.id % 4 == 1 and req.id not in self.held:
            self.held.add(req.id)
            return WAIT
        return req.id % self.n


def _cluster(n: int = 2) -> list[InstanceConfig]:
    eng = EngineConfig(policy="chunked", max_model_len=512, num_gpu_blocks=40, block_size=16, max_num_seqs=8)
    return [InstanceConfig(profile=LinearProfile(base=0.005, per_token=2e-4), engine=eng) for _ in range(n)]


def _workload(n: int = 120):
    # prompts up to 700 tokens: some exceed max_model_len (unservable); outputs long enough to outgrow the cache
    return requests([(0.02 * i, 20 + (i * 37) % 680, 10 + (i * 53) % 400) for i in range(n)])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("tick", [None, 0.05])
def test_saved_files_with_router_drops_and_waits(tmp_path, tick):
    res = simulate(_cluster(), _workload(), _DropWaitRouter(2), on_unservable="drop", central_queue_tick=tick)
    res.save(tmp_path)
    done, dropped, _ = check_saved(tmp_path, list(range(120)))
    reasons = dropped["reason"].value_counts().to_dict()
    assert reasons["router"] == sum(1 for i in range(120) if i % 3 == 0 and 20 + (i * 37) % 680 < 512)
    assert reasons["prompt_exceeds_max_model_len"] > 0
    held = done[done["id"] % 4 == 1]
    assert len(held) > 0 and (held["routed_time"] >= held["arrival"]).all()


@pytest.mark.timeout(30)
def test_saved_files_with_never_routed(tmp_path):
    """Requests the router holds forever end as never_routed once the cluster is idle, and are saved."""
    never = {5, 6, 50, 119}
    res = simulate(_cluster(), _workload(), _DropWaitRouter(2, never), on_unservable="drop")
    res.save(tmp_path)
    _, dropped, summary = check_saved(tmp_path, list(range(120)))
    assert set(dropped.loc[dropped["reason"] == "never_routed", "id"]) == never
    assert summary["dropped_by_reason"]["never_routed"] == len(never)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stream", [False, True])
def test_summary_preemptions_count_those_of_dropped_requests(tmp_path, stream):
    """A request preempted, then dropped as it outgrew the cache, was preempted all the same: summary.json's
    ``preemptions`` is every preemption the instances made (instances.csv), not only the completed requests'."""
    eng = EngineConfig(policy="vllm_v0", max_model_len=2048, num_gpu_blocks=40, block_size=16, max_num_seqs=8)
    cluster = [InstanceConfig(profile=LinearProfile(base=0.005, per_token=2e-4), engine=eng)]
    res = simulate(cluster, requests([(0.01 * i, 100 + 20 * i, 300 + 40 * (i % 5)) for i in range(12)]),
                   on_unservable="drop", stream_to=tmp_path / "r.parquet" if stream else None)
    s = res.summary
    assert s["dropped_by_reason"].get("exceeds_kv_capacity", 0) > 0
    assert s["preemptions"] == int(res.instances["preemptions"].sum()) > 0
    done = pd.read_parquet(tmp_path / "r.parquet") if stream else res.requests
    assert s["preempted_requests"] > int((done["preemptions"] > 0).sum())
