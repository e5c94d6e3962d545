"""llmsim-deploy: pruning before simulation, the cheapest verified cluster, the frontier, and the Hydra app."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmsim.errors import ConfigError, ProfileError
from llmsim.perf.profile import load_profile
from llmsim.planning.candidates import Candidate, DeployConfig, Plan, Prices, enumerate_candidates
from llmsim.planning.capacity import base_config, rate_modes
from llmsim.planning.deploy import measure, run_deploy, verify
from llmsim.planning.deploy_report import _mark_pareto, build_report, print_report
from llmsim.planning.runner import Job, Runner
from llmsim.planning.search import CapacityConfig, Point, RateSearch
from llmsim.resources import conf_dir
from tests.planning.helpers import compose

PRICES = {"a100-80gb": 1.79, "h100": 2.99, "rtx4090": 0.69, "v100-16gb": 0.55, "l4": 0.43}


def test_skips_are_counted_before_any_simulation() -> None:
    d = DeployConfig(gpus=["a100-80gb", "v100-16gb", "l4", "titan-rtx"], tp=[1, 2],
                     engines=[{"name": "v0", "policy": "vllm_v0"}])
    keep, skipped = enumerate_candidates(d, PRICES, {"engine": {}})
    assert [c.name for c in keep] == ["a100-80gb tp1 v0"]
    reasons = {(s["gpu"], s["tp"]): s["reason"] for s in skipped}
    assert reasons[("v100-16gb", 1)] == "does_not_fit"  # 13.5 GB of weights leave < 4096 tokens of KV
    assert reasons[("l4", 1)] == "no_profile" and reasons[("a100-80gb", 2)] == "no_profile"
    assert reasons[("titan-rtx", 1)] == "no_price"


def test_memory_check_on_the_roofline_when_allowed() -> None:
    d = DeployConfig(model="llama-2-70b", gpus=["a100-80gb"], tp=[1, 2], allow_estimated_profiles=True)
    keep, skipped = enumerate_candidates(d, PRICES, {"engine": {}})
    assert [c.name for c in keep] == ["a100-80gb tp2 default"] and not keep[0].estimated_profile
    assert skipped[0]["reason"] == "does_not_fit" and "does not fit on 1 x a100-80gb" in skipped[0]["detail"]


@pytest.mark.parametrize("deploy,needle", [
    ({"gpus": ["a100-80gb", "b300"]}, "deploy.gpus[1]: unknown GPU 'b300'"),
    ({"engines": [{"name": "x", "max_num_seqs": 0}]}, "deploy.engines[0].max_num_seqs: expected a value >= 1"),
    ({"engines": [{"policy": "chunked"}]}, "deploy.engines[0].name: expected a unique non-empty name"),
    ({"engines": [{"name": "x", "kv_cache_dtype": "fp4"}]}, "deploy.engines[0].kv_cache_dtype must be one of auto,"),
    ({"target_rate": -1}, "deploy.target_rate: expected a value > 0"),
    ({"target_rate": 0.1}, "deploy.target_rate: expected a value >= capacity.rate_min (0.25), got 0.1"),
    ({"tp": []}, "deploy.tp: expected a list of at least 1 item, got []"),
    ({"model": "gpt-9"}, "deploy.model: unknown model"),
    ({"gpus": ["titan-rtx"]}, "deploy: no configuration left to simulate ({'no_price': 1})"),
    ({"prune": "yes"}, "deploy.prune: expected true or false, got 'yes'"),
    ({"verify": 0}, "deploy.verify: expected true or false, got 0"),
    ({"allow_estimated_profiles": "no"}, "deploy.allow_estimated_profiles: expected true or false, got 'no'"),
    ({"measure_chosen": 1}, "deploy.measure_chosen: expected true or false, got 1"),
])
def test_bad_deploy_config_is_one_line(deploy, needle, tmp_path) -> None:
    cfg = compose(deploy=deploy, prices={"per_gpu_hour": PRICES})
    with pytest.raises(ConfigError) as e:
        run_deploy(cfg, tmp_path, quiet=True)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_price_table_names_are_checked() -> None:
    assert Prices(per_gpu_hour={"a100": 1.0, "4090": 0.5}).table() == {"a100-80gb": 1.0, "rtx4090": 0.5}
    with pytest.raises(ConfigError, match="prices.per_gpu_hour.tpu: unknown GPU"):
        Prices(per_gpu_hour={"tpu": 1.0}).table()


def test_shipped_price_tables_parse() -> None:
    for f in sorted((conf_dir() / "prices").glob("*.yaml")):
        p = Prices.parse(yaml.safe_load(f.read_text()))
        assert p.table() and p.source and p.date, f


def test_pareto_marks_dominated_points() -> None:
    pts = [{"cost_per_hour": c, "capacity_rps": r, "verified": v} for c, r, v in
           [(1, 2, None), (2, 1, None), (2, 5, None), (3, 5, None), (4, 9, False), (5, 8, True)]]
    _mark_pareto(pts)
    assert [p["pareto"] for p in pts] == [True, False, True, False, False, True]


@pytest.mark.timeout(120)
def test_tiny_search_finds_the_cheaper_feasible_gpu(tmp_path) -> None:
    """Two GPU types, one engine, small budget: the cheapest cluster for the target wins, verified, outputs
    written, runs per minute reported; V100-16GB is skipped (does not fit) without a simulation."""
    args = ["deploy.gpus=[a100-80gb,rtx4090,v100-16gb]", "deploy.tp=[1]", "deploy.engines=[{name:v0,policy:vllm_v0}]",
            "deploy.target_rate=3", "deploy.prune=false", "deploy.counts=[1,2,4]", "capacity.seeds=1",
            "capacity.num_requests=150", "capacity.tolerance=0.1", "capacity.workers=2", "deploy.verify_parallel=1",
            f"hydra.run.dir={tmp_path}/run"]
    p = subprocess.run([sys.executable, "-m", "llmsim.cli.planning", "deploy", *args], cwd=tmp_path,
                       capture_output=True, text=True, timeout=110)
    assert p.returncode == 0, p.stderr[-3000:]
    run = tmp_path / "run"
    rep = json.loads((run / "deploy.json").read_text())
    cands = {c["gpu"]: c for c in rep["candidates"]}
    assert set(cands) == {"a100-80gb", "rtx4090"} and rep["skipped"] == {"does_not_fit": 1}
    for c in cands.values():
        assert c["status"] == "searched" and c["capacity_per_replica"] > 0
        assert c["replicas_needed"] == math.ceil(3 / c["capacity_per_replica"] - 1e-9)
        assert c["cost_for_target"] == pytest.approx(c["replicas_needed"] * c["price_per_gpu_hour"])
    cheapest = min(cands.values(), key=lambda c: c["cost_for_target"])
    ch = rep["chosen"]
    assert ch["gpu"] == cheapest["gpu"] and ch["replicas"] >= cheapest["replicas_needed"] and ch["ok"]
    assert ch["attainment"] >= 0.9 and ch["capacity_rps"] >= 3
    assert rep["frontier"] and all(pt["pareto"] for pt in rep["frontier"])
    assert any(pt["chosen"] and pt["pareto"] for pt in rep["points"])
    assert rep["runs"] > 0 and rep["runs_per_min"] > 0
    for f in ("deploy_candidates.csv", "deploy_frontier.csv", "deploy.png"):
        assert (run / f).stat().st_size > 0, f
    assert "runs/min" in p.stdout and "cheapest:" in p.stdout
    # one replica's capacity is explained beside the candidates table, against llmsim-capacity's cluster figure
    assert "cap/replica is one replica alone, 150 requests per run" in p.stdout and rep["replica_note"]
    assert p.stderr.startswith("llmsim-deploy: 2 candidates to search (1 skipped before simulating)")
    assert "llmsim-deploy: one-replica capacity of 2 candidates" in p.stderr


def test_app_bad_deploy_config_exits_2(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "llmsim.cli.planning", "deploy", "deploy.budget=0",
                        f"hydra.run.dir={tmp_path}/run"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr[-2000:]
    assert lines[0] == "llmsim-deploy: error: deploy.budget: expected a value >= 1, got 0"
    assert not (tmp_path / "run").exists()  # a failed run leaves no folder


def test_same_report_on_one_and_two_workers(tmp_path) -> None:
    """Lockstep rounds, pruning and verification decide the same way whatever the number of workers."""
    def run(workers: int) -> dict:
        cfg = compose(deploy={"gpus": ["a100-80gb", "rtx4090"], "engines": [{"name": "v0", "policy": "vllm_v0"}],
                              "target_rate": 2.0, "counts": [1, 2]},
                      capacity={"seeds": 1, "num_requests": 150, "tolerance": 0.1, "workers": workers},
                      prices={"per_gpu_hour": PRICES})
        rep = run_deploy(cfg, tmp_path / str(workers), quiet=True)
        return {k: v for k, v in rep.items() if k not in ("wall_s", "runs_per_min", "workers")}

    assert run(1) == run(2)


@pytest.mark.parametrize("app,name", [("deploy", "llmsim-deploy"), ("capacity", "llmsim-capacity")])
def test_help_names_the_app(app, name, tmp_path) -> None:
    p = subprocess.run([sys.executable, "-m", "llmsim.cli.planning", app, "--help"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith(f"{name}: "), p.stdout[:300]
    assert "== Examples ==" in p.stdout and "powered by Hydra" not in p.stdout


@pytest.mark.parametrize("module", ["llmsim.planning.deploy", "llmsim.planning.capacity"])
def test_the_old_module_commands_say_where_the_apps_went(module, tmp_path) -> None:
    p = subprocess.run([sys.executable, "-m", module, "--help"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert f"python -m llmsim.cli.planning {module.rsplit('.', 1)[1]}" in p.stderr


def test_a_config_of_a_measured_architecture_counts_as_measured(tmp_path) -> None:
    """A Llama-3.1-8B-Instruct config.json is priced by Llama-3.1-8B's measured RTX 4090 profile, so the deploy
    search keeps it without allow_estimated_profiles (the profile file is llama-3.1-8b's, not its own name's)."""
    cfg = {"_name_or_path": "acme/llama-3.1-8b-deploy-chat", "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 14336, "max_position_embeddings": 131072, "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16", "vocab_size": 128256}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    d = DeployConfig(model=str(path), gpus=["rtx4090"], tp=[1], engines=[{"name": "v1", "max_model_len": 8192}])
    keep, skipped = enumerate_candidates(d, PRICES, {"engine": {}})
    assert [c.name for c in keep] == ["rtx4090 tp1 v1"] and not keep[0].estimated_profile, skipped


def test_candidate_profiles_are_built_from_the_users_config(tmp_path) -> None:
    """A config.json of a registered architecture with a longer context (linear rope_scaling x4) keeps its own
    length inside every candidate's profile, not the registered model's 8192."""
    cfg = {"_name_or_path": "meta-llama/Meta-Llama-3-8B", "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 14336, "max_position_embeddings": 8192, "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16", "vocab_size": 128256,
           "rope_scaling": {"type": "linear", "factor": 4.0}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    d = DeployConfig(model=str(path), gpus=["a100-80gb", "h100"], tp=[1], allow_estimated_profiles=True)
    keep, _ = enumerate_candidates(d, PRICES, {"engine": {}})
    assert len(keep) == 2
    for cand in keep:
        assert cand.info["profile"].model.max_position == 32768, cand.name
        assert cand.info["engine_resolved"].max_model_len == 32768


def test_a_tp_that_does_not_split_the_heads_is_skipped(tmp_path) -> None:
    """Qwen2.5-7B's 28 attention heads do not split over 8 GPUs (vLLM refuses to start): that candidate is skipped
    before simulating with its reason, the others kept; a cluster asking for it is one line."""
    d = DeployConfig(model="qwen2.5-7b", gpus=["a100-80gb"], tp=[1, 4, 8], allow_estimated_profiles=True)
    keep, skipped = enumerate_candidates(d, PRICES, {"engine": {}})
    assert [c.name for c in keep] == ["a100-80gb tp1 default", "a100-80gb tp4 default"]
    assert [(s["tp"], s["reason"]) for s in skipped] == [(8, "does_not_split")]
    assert "28 attention heads do not split over tp=8" in skipped[0]["detail"]
    with pytest.raises(ProfileError, match="28 attention heads do not split over tp=8"):
        load_profile("qwen2.5-7b", "a100-80gb", 8)


def test_an_engine_variant_may_set_an_fp8_kv_cache() -> None:
    """``kv_cache_dtype`` in a ``deploy.engines`` entry (an instance key, vLLM's --kv-cache-dtype): the fp8
    candidate's profile caches one byte per value, so its KV cache holds twice the tokens of the 16-bit one, and
    its clusters run with that cache."""
    d = DeployConfig(model="llama-3.1-8b", gpus=["a100-80gb"], tp=[1],
                     engines=[{"name": "bf16"}, {"name": "fp8kv", "kv_cache_dtype": "FP8", "max_num_seqs": 64}])
    keep, skipped = enumerate_candidates(d, PRICES, {"engine": {}})
    assert [c.name for c in keep] == ["a100-80gb tp1 bf16", "a100-80gb tp1 fp8kv"] and not skipped
    bf16, fp8 = keep
    assert (bf16.kv_cache_dtype, fp8.kv_cache_dtype) == ("auto", "fp8")
    assert fp8.info["profile"].model.kv_bytes_per_token * 2 == bf16.info["profile"].model.kv_bytes_per_token
    assert fp8.info["kv_tokens"] > 1.9 * bf16.info["kv_tokens"]
    assert fp8.engine == {"max_num_seqs": 64}  # the engine group gets only engine keys
    inst = fp8.cluster("llama-3.1-8b", 2)["instances"][0]
    assert inst["kv_cache_dtype"] == "fp8" and inst["count"] == 2
    assert bf16.cluster("llama-3.1-8b", 1)["instances"][0]["kv_cache_dtype"] == "auto"


def _cluster_stub(cfg: dict) -> dict:
    """A cluster of n replicas meets the SLOs up to 150 req/s per replica."""
    n, rate = cfg["cluster"]["instances"][0]["count"], cfg["workload"]["rate"]
    return {"slo_attainment": 1.0 if rate <= 150 * n else 0.0}


def test_chosen_cluster_is_measured_above_a_target_beyond_one_replicas_rate_max() -> None:
    """3 replicas verified at 400 req/s (above capacity.rate_max = 256, which bounds one replica): the chosen
    cluster's own capacity is measured up to 3 x rate_max, at or above the target it met, near its true 450."""
    base = base_config(compose())
    with Runner(1, _cluster_stub) as runner:
        plan = Plan(base, CapacityConfig(seeds=1), DeployConfig(target_rate=400), rate_modes(base["workload"], 0),
                    runner)
        search = measure(plan, {"_cand": Candidate("a100-80gb", 1, "default", {}, 1.0), "replicas": 3})
    assert 400 <= search.capacity <= 450 and search.capacity >= 450 / 1.05 and search.note == ""


def _all_miss(cfg: dict) -> dict:
    return {"slo_attainment": 0.5}


def test_verification_cut_by_the_budget_says_so(capsys) -> None:
    """Two candidates of 5 req/s per replica for a 10 req/s target: both 2-replica clusters miss, and the budget
    has no room for the 3-replica retries. The run must not say no cluster meets the target in the space."""
    base = base_config(compose())
    cap = CapacityConfig(seeds=1)
    cands = []
    for k, gpu in enumerate(["a100-80gb", "h100"]):
        c = Candidate(gpu, 1, "default", {}, 1.0 + k, status="searched")
        search = RateSearch(cap)
        search.record(Point(5.0, 1.0, [1.0], 0, 0, 0, 0))
        search.record(Point(5.2, 0.0, [0.0], 0, 0, 0, 0))
        c.job = Job(search, lambda r: [])
        cands.append(c)
    with Runner(1, _all_miss, budget=3) as runner:
        plan = Plan(base, cap, DeployConfig(target_rate=10), rate_modes(base["workload"], 0), runner)
        verified, best = verify(plan, cands)
        rep = build_report(plan, cands, [], verified, best, None, Prices(per_gpu_hour={"h100": 1.0}), 1.0)
    assert [(v["replicas"], v["ok"]) for v in verified] == [(2, False), (2, False)] and best is None
    assert rep["verification_cut_by_budget"] is True
    print_report(rep)
    assert "ran out: raise deploy.budget" in capsys.readouterr().out


def _replica_stub(cfg: dict) -> dict:
    """n replicas meet the SLOs up to 20.1 req/s each."""
    n, rate = cfg["cluster"]["instances"][0]["count"], cfg["workload"]["rate"]
    return {"slo_attainment": 1.0 if rate <= 20.1 * n else 0.0}


def test_one_replica_verified_at_the_target_reports_a_capacity_at_the_target() -> None:
    """The replica's search stopped at [19.5, 20.3] (within tolerance); 1 replica is verified at the 20 req/s
    target (its linear estimate is within the slack) and meets it: the chosen cluster and the candidate row then
    report a capacity of at least 20, not 19.5, below the target it met."""
    base = base_config(compose())
    cap = CapacityConfig(seeds=1)
    c = Candidate("a100-80gb", 1, "default", {}, 1.0, status="searched")
    search = RateSearch(cap)
    search.record(Point(19.5, 1.0, [1.0], 0, 0, 0, 0))
    search.record(Point(20.3, 0.0, [0.0], 0, 0, 0, 0))
    c.job = Job(search, lambda r: [])
    with Runner(1, _replica_stub) as runner:
        plan = Plan(base, cap, DeployConfig(target_rate=20), rate_modes(base["workload"], 0), runner)
        verified, best = verify(plan, [c])
        assert best is not None and best["replicas"] == 1 and best["ok"]
        assert measure(plan, best).capacity >= 20 and c.capacity >= 20 and c.replicas_for(20) == 1
