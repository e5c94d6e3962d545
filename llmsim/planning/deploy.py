"""Deployment search: the cheapest cluster (GPU type x count x tensor parallelism x engine) meeting the SLOs.

    llmsim-deploy deploy.target_rate=20 slo.ttft_ms=2000 slo.tpot_ms=100
    llmsim-deploy deploy.gpus=[a100-80gb,h100,a10,rtx4090] deploy.engines=[{name:v0,policy:vllm_v0}] prices=aws
    python -m llmsim.planning.deploy ...                        # the same

The question Vidur-Search (microsoft/vidur, ``vidur/config_optimizer``) answers, asked the cheap way. Vidur
binary-searches the QPS of every full (cluster, scheduler, batch size) configuration, one simulator process
per run. Here:

1. **Prune before simulating.** Every (GPU, tp, engine variant) is checked first: a GPU without a price, a
   (model, GPU, tp) without a measured profile (``deploy.allow_estimated_profiles`` admits roofline ones), a
   model whose weights leave no room for one ``max_model_len`` sequence of KV cache (vLLM refuses to start
   then), or a tp above ``deploy.max_gpus`` is skipped with a counted reason, at no simulation cost.
2. **One replica, not the cluster.** The capacity search of :mod:`llmsim.planning.capacity` runs on a single replica
   of each remaining configuration (all of them interleaved on one process pool, in lockstep rounds, so
   the result does not depend on the number of workers). A replica's simulation is ``n`` times smaller than
   the cluster's, and one search serves every replica count: ``n = ceil(target_rate / capacity_1)``.
   Each search starts at an analytic estimate of the replica's throughput (profile step times at the batch
   the KV cache allows), which saves the bracketing steps.
3. **Branch and bound.** After every round, a configuration whose cost is already bounded below by more than
   the cost of some other configuration that is known to reach the target (``ceil(target / hi)`` replicas,
   ``hi`` a rate it already missed) is stopped (``deploy.prune``).
4. **Verify.** The cheapest configurations are then simulated as whole clusters at the target rate, with
   the same requests per replica as the replica search (router: the ``policy`` group); one that misses the
   target gets one more replica (up to ``deploy.max_extra_replicas``). The cheapest verified cluster is the
   answer, and its own capacity is measured (``deploy.measure_chosen``).

Outputs (Hydra run directory): ``deploy.json``, ``deploy_candidates.csv``, ``deploy_frontier.csv`` and
``deploy.png`` (cost $/h vs capacity req/s; Pareto frontier highlighted, dominated points grey). The run ends
with the number of simulations and simulations per minute. See docs/capacity.md.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field

from llmsim.errors import ConfigError
from llmsim.planning.capacity import (
    CapacityConfig,
    Job,
    RateSearch,
    Runner,
    base_config,
    check_metric,
    cpu_count,
    hydra_app,
    make_point,
    preflight,
    rate_mode,
    run_config,
)
from llmsim.schema import NonNegFloat, NonNegInt, PosFloat, PosInt, Schema

#: A replica search starts at this share of the analytic throughput prior (capacity at the SLO is below
#: saturation) and steps by PRIOR_GROWTH, squared after each step that does not bracket (a prior far off).
PRIOR_START = 0.8
PRIOR_GROWTH = 1.3


class DeployConfig(Schema):
    """``deploy`` group: the space of clusters, the target and the budget."""

    where: ClassVar[str] = "deploy"
    model: Annotated[str, Field(min_length=1)] = "llama-2-7b"
    gpus: Annotated[list[str], Field(min_length=1)] = ["a100-80gb", "h100"]
    tp: Annotated[list[Annotated[PosInt, Field(le=64)]], Field(min_length=1)] = [1]
    engines: Annotated[list[dict[str, Any]], Field(min_length=1)] = Field(
        default_factory=lambda: [{"name": "default"}])
    target_rate: PosFloat = 10.0
    max_gpus: PosInt = 64
    counts: list[PosInt] = [1, 2, 4, 8, 16, 32, 64]
    budget: PosInt = 600
    allow_estimated_profiles: bool = False
    prune: bool = True
    verify: bool = True
    verify_parallel: PosInt = 2
    max_extra_replicas: NonNegInt = 2
    fewer_replicas_slack: Annotated[NonNegFloat, Field(lt=1)] = 0.1
    measure_chosen: bool = True


class Prices(Schema):
    """``prices`` group: on-demand price per GPU-hour by GPU name (see conf/prices/*.yaml for sources)."""

    where: ClassVar[str] = "prices"
    currency: str = "USD"
    source: str = ""
    date: str = ""
    per_gpu_hour: dict[str, PosFloat]

    def table(self) -> dict[str, float]:
        """Prices by canonical GPU name (aliases such as ``a100`` accepted)."""
        from llmsim.perf.hardware import get_gpu

        out = {}
        for name, price in self.per_gpu_hour.items():
            try:
                out[get_gpu(name).name] = float(price)
            except ConfigError as e:
                raise ConfigError(f"prices.per_gpu_hour.{name}: {e}") from None
        return out


@dataclass
class Candidate:
    """One (GPU, tp, engine variant): its single-replica capacity and the replica count it needs."""

    gpu: str
    tp: int
    engine_name: str
    engine: dict[str, Any]
    price: float  # per GPU-hour
    prior_rps: float = 0.0  # analytic throughput estimate of one replica
    estimated_profile: bool = False
    job: Job | None = None
    status: str = "pending"
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.gpu} tp{self.tp} {self.engine_name}"

    @property
    def replica_cost(self) -> float:
        return self.tp * self.price

    @property
    def capacity(self) -> float:
        return self.job.search.capacity if self.job else 0.0

    def replicas_for(self, rate: float, capacity: float | None = None) -> int | None:
        c = self.capacity if capacity is None else capacity
        return math.ceil(rate / c - 1e-9) if c > 0 else None

    def cluster(self, model: str, n: int) -> dict[str, Any]:
        return {"instances": [{"model": model, "gpu": self.gpu, "tp": self.tp, "count": n,
                               "engine": dict(self.engine)}]}


# ---------------------------------------------------------------------------------------------- candidates
def enumerate_candidates(dcfg: DeployConfig, prices: dict[str, float], base: dict[str, Any],
                         ) -> tuple[list[Candidate], list[dict[str, Any]]]:
    """Every (GPU, tp, engine variant), split into those worth simulating and the skipped ones (with reasons)."""
    from llmsim.engine.config import EngineConfig
    from llmsim.perf.hardware import get_gpu
    from llmsim.perf.models import get_model

    try:
        model = get_model(dcfg.model)
    except ConfigError as e:
        raise ConfigError(f"deploy.model: {e}") from None
    engines = {}
    for k, spec in enumerate(dcfg.engines):
        over = dict(spec)
        name = over.pop("name", None)
        if not isinstance(name, str) or not name or name in engines:
            raise ConfigError(f"deploy.engines[{k}].name: expected a unique non-empty name for the engine variant, "
                              f"got {name!r}")
        eng = EngineConfig.parse({**(base.get("engine") or {}), **over}, f"deploy.engines[{k}]")
        try:
            engines[name] = (over, eng.resolved(model.max_position, model.name))
        except ConfigError as e:
            raise ConfigError(f"deploy.engines[{k}] ({name}): {e}") from None
    keep, skipped = [], []
    for k, g in enumerate(dcfg.gpus):
        try:
            gpu = get_gpu(g).name
        except ConfigError as e:
            raise ConfigError(f"deploy.gpus[{k}]: {e}") from None
        for tp in sorted(set(dcfg.tp)):
            for ename, (over, eng) in engines.items():
                cand = Candidate(gpu, tp, ename, over, prices.get(gpu, 0.0))
                reason, detail = _check(cand, model.name, eng, dcfg)
                if reason:
                    skipped.append({"gpu": gpu, "tp": tp, "engine": ename, "reason": reason, "detail": detail})
                else:
                    keep.append(cand)
    return keep, skipped


def _check(cand: Candidate, model: str, eng: Any, dcfg: DeployConfig) -> tuple[str, str]:
    """("", "") if the candidate can run, else (reason, detail); also fills its throughput prior."""
    from llmsim.perf.profile import load_profile
    from llmsim.perf.profile_table import find_profile_file

    if cand.price <= 0:
        return "no_price", f"no prices.per_gpu_hour entry for {cand.gpu}"
    if cand.tp > dcfg.max_gpus:
        return "exceeds_max_gpus", f"tp {cand.tp} > deploy.max_gpus {dcfg.max_gpus}"
    measured = find_profile_file(model, cand.gpu, cand.tp) is not None
    if not measured and not dcfg.allow_estimated_profiles:
        return "no_profile", f"no measured profile for {model} on {cand.gpu} tp{cand.tp}"
    prof = load_profile(model, cand.gpu, cand.tp, "auto")
    cand.estimated_profile = not measured  # the roofline stands in (allow_estimated_profiles)
    try:
        kv = (eng.num_gpu_blocks * eng.block_size if eng.num_gpu_blocks
              else prof.kv_capacity_tokens(eng.gpu_memory_utilization))
    except ConfigError as e:
        return "does_not_fit", " ".join(str(e).split())
    if kv < eng.max_model_len:
        return "does_not_fit", (f"KV cache of {kv} tokens < max_model_len {eng.max_model_len} "
                                f"(gpu_memory_utilization {eng.gpu_memory_utilization})")
    cand.info["kv_tokens"] = int(kv)
    cand.info["profile"] = prof
    cand.info["engine_resolved"] = eng
    return "", ""


def workload_means(workload: dict[str, Any], seed: int, n: int = 256) -> tuple[float, float]:
    """Mean prompt and output tokens of the first ``n`` requests (lengths do not depend on the rate)."""
    from llmsim.workload import build_workload

    wl = {k: v for k, v in workload.items() if k not in ("max_requests", "num_requests", "duration")}
    wl["num_requests" if wl.get("kind") == "synthetic" else "max_requests"] = n
    reqs = list(build_workload(wl, seed))
    return (sum(r.prompt_tokens for r in reqs) / len(reqs), sum(r.output_tokens for r in reqs) / len(reqs))


def throughput_prior(cand: Candidate, prompt: float, output: float) -> float:
    """Requests/s one replica sustains when saturated, from its profile: a batch of B sequences (KV- and
    max_num_seqs-limited) decodes ``output`` steps while each of the B prompts is prefilled once.

    Only a starting rate and an ordering: the search measures the real capacity."""
    prof, eng = cand.info["profile"], cand.info["engine_resolved"]
    per_req = max(1.0, prompt + output)
    b = max(1, min(eng.max_num_seqs, int(cand.info["kv_tokens"] // per_req)))
    t_dec = prof.step_time(b, b, 0, 0, b, int(b * (prompt + output / 2)))
    p = max(1, int(prompt))
    t_pre = prof.step_time(p, 1, p * p, 0, 0, 0)
    return b / (output * t_dec + b * t_pre)


# ---------------------------------------------------------------------------------------------- phases
@dataclass
class Plan:
    """Everything one deployment search needs, shared by its phases."""

    base: dict[str, Any]
    cap: CapacityConfig
    dcfg: DeployConfig
    mode: tuple[str, float]
    runner: Runner

    def configs(self, cand: Candidate, n: int, rate: float) -> list[dict[str, Any]]:
        """Per-seed run configs of ``n`` replicas at ``rate``: ``num_requests`` per replica."""
        c = self.cap
        return [run_config(self.base, cand.cluster(self.dcfg.model, n), self.base["policy"], rate, c.seed0 + k,
                           c.num_requests * n, self.mode) for k in range(c.seeds)]


def search_replicas(plan: Plan, cands: list[Candidate]) -> None:
    """Single-replica capacity of every candidate, interleaved, with branch-and-bound pruning per round."""
    cap, dcfg = plan.cap, plan.dcfg
    for cand in cands:
        start = min(max(PRIOR_START * cand.prior_rps, cap.rate_min), cap.rate_max)
        search = RateSearch(cap, start=start, growth=PRIOR_GROWTH, accelerate=True)
        cand.job = Job(search, lambda r, c=cand: plan.configs(c, 1, r), cap.metric)

    def bound(jobs: list[Job]) -> None:
        by_job = {id(c.job): c for c in cands}
        best = math.inf  # cost of a cluster known (by linear scaling) to reach the target
        for c in cands:
            lo, _ = c.job.search.bracket()
            n = c.replicas_for(dcfg.target_rate, lo or 0.0)
            if n is not None and n * c.tp <= dcfg.max_gpus:
                best = min(best, n * c.replica_cost)
        for job in jobs:
            c = by_job[id(job)]
            _, hi = job.search.bracket()
            if job.search.done or hi is None:
                continue
            n_min = math.floor(dcfg.target_rate / hi) + 1  # capacity < hi, so n > target / hi
            if n_min * c.tp > dcfg.max_gpus:
                job.search.stop(f"needs more than {dcfg.max_gpus} GPUs (deploy.max_gpus) for the target")
                c.status = "infeasible"
            elif dcfg.prune and n_min * c.replica_cost > best * (1 + 1e-9):
                job.search.stop(f"pruned: at least ${n_min * c.replica_cost:.2f}/h > ${best:.2f}/h reachable")
                c.status = "pruned"

    plan.runner.drive([c.job for c in cands], bound)
    for c in cands:
        if c.status == "pending":
            c.status = "budget" if c.job.search.note.startswith("budget") else "searched"


def verify(plan: Plan, cands: list[Candidate]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Full-cluster runs at the target rate, cheapest first; a miss retries with one more replica.

    Replicas behind a router do a little better than alone (round robin smooths each one's arrivals), so
    ``n - 1`` replicas are tried too when they fall short of the target by less than ``fewer_replicas_slack``
    on the linear estimate: a cheaper cluster the estimate alone would have missed."""
    dcfg, cap = plan.dcfg, plan.cap
    queue = []
    for order, c in enumerate(cands):
        n = c.replicas_for(dcfg.target_rate)
        if c.status in ("searched", "budget") and n is not None:  # budget: n from a lower bound, conservative
            if n * c.tp <= dcfg.max_gpus:
                queue.append((n * c.replica_cost, order, c, n, n))
                if n > 1 and (n - 1) * c.capacity >= (1 - dcfg.fewer_replicas_slack) * dcfg.target_rate:
                    queue.append(((n - 1) * c.replica_cost, order, c, n - 1, n))
            else:
                c.status = "infeasible"
    queue.sort(key=lambda q: (q[0], q[1]))
    done: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    while queue and (best is None or queue[0][0] < best["cost_per_hour"]):
        batch, queue = queue[:dcfg.verify_parallel], queue[dcfg.verify_parallel:]
        cfgs = [plan.configs(c, n, dcfg.target_rate) for _, _, c, n, _ in batch]
        if plan.runner.budget is not None and plan.runner.runs + plan.runner.new_runs(
                [x for cs in cfgs for x in cs]) > plan.runner.budget:
            break
        results = plan.runner.map([x for cs in cfgs for x in cs])
        for i, (cost, order, c, n, n0) in enumerate(batch):
            pt = make_point(dcfg.target_rate, results[i * cap.seeds:(i + 1) * cap.seeds], cap.metric)
            row = {"candidate": c.name, "gpu": c.gpu, "tp": c.tp, "engine": c.engine_name, "replicas": n,
                   "gpus": n * c.tp, "cost_per_hour": cost, "attainment": pt.attainment, "per_seed": pt.per_seed,
                   "ok": pt.attainment >= cap.target, "_cand": c}
            done.append(row)
            if row["ok"] and (best is None or (cost, order) < (best["cost_per_hour"], best["_order"])):
                best = {**row, "_order": order}
            elif not row["ok"] and n0 <= n < n0 + dcfg.max_extra_replicas and (n + 1) * c.tp <= dcfg.max_gpus:
                queue.append(((n + 1) * c.replica_cost, order, c, n + 1, n0))
        queue.sort(key=lambda q: (q[0], q[1]))
    return done, best


def measure(plan: Plan, best: dict[str, Any]) -> RateSearch:
    """The chosen cluster's own capacity: starts at the (cached) verified target rate, grows by 25 %."""
    c, n = best["_cand"], best["replicas"]
    if n == 1:  # the chosen cluster is the replica already searched
        return c.job.search
    search = RateSearch(plan.cap, start=plan.dcfg.target_rate, growth=1.25, accelerate=True)
    plan.runner.drive([Job(search, lambda r: plan.configs(c, n, r), plan.cap.metric)])
    return search


# ---------------------------------------------------------------------------------------------- the app
def run_deploy(cfg: dict[str, Any], out_dir: str | Path, quiet: bool = False) -> dict[str, Any]:
    """The whole app on a plain config: ``deploy``, ``prices`` and ``capacity`` groups + the run groups."""
    from llmsim.planning.deploy_report import build_report, print_report, write_outputs

    t0 = time.perf_counter()
    cap = CapacityConfig.parse(cfg.get("capacity")).checked()
    dcfg = DeployConfig.parse(cfg.get("deploy"))
    prices = Prices.parse(cfg.get("prices"))
    base = base_config(cfg)
    check_metric(cap.metric, base)
    cands, skipped = enumerate_candidates(dcfg, prices.table(), base)
    if not cands:
        reasons = Counter(s["reason"] for s in skipped)
        raise ConfigError(f"deploy: no configuration left to simulate ({dict(reasons)}); widen deploy.gpus / "
                          "deploy.tp, add prices, or set deploy.allow_estimated_profiles=true")
    prompt, output = workload_means(base["workload"], cap.seed0)
    for c in cands:
        c.prior_rps = throughput_prior(c, prompt, output)
    # most promising first: the budget, when short, cuts the rest
    cands.sort(key=lambda c: (c.replica_cost / max(c.prior_rps, 1e-9), c.name))
    mode = rate_mode(base["workload"], cap.num_requests, cap.seed0)
    preflight(run_config(base, cands[0].cluster(dcfg.model, 1), base["policy"], cap.rate_min, cap.seed0,
                         cap.num_requests, mode))
    workers = min(cap.workers or cpu_count(), max(1, len(cands) * cap.seeds * cap.points_per_round))
    with Runner(workers, budget=dcfg.budget) as runner:
        plan = Plan(base, cap, dcfg, mode, runner)
        # keep some of the budget for the cluster runs: two verification rounds and the chosen one's search
        reserve = cap.seeds * ((2 * dcfg.verify_parallel if dcfg.verify else 0) + (4 if dcfg.measure_chosen else 0))
        runner.budget = dcfg.budget - min(reserve, dcfg.budget // 2)
        search_replicas(plan, cands)
        runner.budget = dcfg.budget
        verified, best = verify(plan, cands) if dcfg.verify else ([], None)
        measured = measure(plan, best) if best is not None and dcfg.measure_chosen else None
    wall = time.perf_counter() - t0
    report = build_report(plan, cands, skipped, verified, best, measured, prices, wall)
    write_outputs(report, Path(out_dir))
    if not quiet:
        print_report(report)
    return report


def _app(cfg: dict[str, Any], out_dir: str, cluster_label: str | None) -> None:
    run_deploy(cfg, out_dir)


def main() -> None:
    hydra_app("deploy", "llmsim-deploy", _app)


__all__ = ["Candidate", "DeployConfig", "Prices", "enumerate_candidates", "main", "run_deploy"]

if __name__ == "__main__":
    main()
