"""Deployment search: the cheapest cluster (GPU type x count x tensor parallelism x engine) meeting the SLOs.

    llmsim-deploy deploy.target_rate=20 slo.ttft_ms=2000 slo.tpot_ms=100
    llmsim-deploy deploy.gpus=[a100-80gb,h100,a10,rtx4090] deploy.engines=[{name:v0,policy:vllm_v0}] prices=aws
    python -m llmsim.cli.planning deploy ...                    # the same

The question Vidur-Search (microsoft/vidur, ``vidur/config_optimizer``) answers, asked the cheap way. Vidur
binary-searches the QPS of every full (cluster, scheduler, batch size) configuration, one simulator process
per run. Here:

1. **Prune before simulating.** Every (GPU, tp, engine variant) is checked first: a GPU without a price, a
   (model, GPU, tp) without a measured profile (``deploy.allow_estimated_profiles`` admits roofline ones), a
   model whose weights leave no room for one ``max_model_len`` sequence of KV cache (vLLM refuses to start
   then), or a tp above ``deploy.max_gpus`` is skipped with a counted reason, at no simulation cost.
2. **One replica, not the cluster.** The capacity search of :mod:`llmsim.planning.search` runs on a single replica
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
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from llmsim.errors import ConfigError
from llmsim.planning.candidates import (
    Candidate,
    DeployConfig,
    Plan,
    Prices,
    enumerate_candidates,
    throughput_prior,
    workload_means,
)
from llmsim.planning.capacity import (
    PREFLIGHT_REQUESTS,
    base_config,
    check_metric,
    preflight,
    rate_modes,
    run_config,
)
from llmsim.planning.deploy_report import build_report, print_report, write_outputs
from llmsim.planning.progress import SearchProgress
from llmsim.planning.runner import Job, Runner, cpu_count
from llmsim.planning.search import CapacityConfig, RateSearch, make_point, rate_key

#: A replica search starts at this share of the analytic throughput prior (capacity at the SLO is below
#: saturation) and steps by PRIOR_GROWTH, squared after each step that does not bracket (a prior far off).
PRIOR_START = 0.8
PRIOR_GROWTH = 1.3


def search_replicas(plan: Plan, cands: list[Candidate]) -> None:
    """Single-replica capacity of every candidate, interleaved, with branch-and-bound pruning per round."""
    cap, dcfg = plan.cap, plan.dcfg
    for cand in cands:
        start = min(max(PRIOR_START * cand.prior_rps, cap.rate_min), cap.rate_max)
        search = RateSearch(cap, start=start, growth=PRIOR_GROWTH, accelerate=True)
        cand.job = Job(search, lambda r, c=cand: plan.configs(c, 1, r), cap.metric, label=cand.name)

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
            plan.verify_cut = True
            break
        results = plan.runner.map([x for cs in cfgs for x in cs])
        for i, (cost, order, c, n, n0) in enumerate(batch):
            pt = make_point(dcfg.target_rate, results[i * cap.seeds:(i + 1) * cap.seeds], cap.metric)
            row = {"candidate": c.name, "gpu": c.gpu, "tp": c.tp, "engine": c.engine_name, "replicas": n,
                   "gpus": n * c.tp, "cost_per_hour": cost, "attainment": pt.attainment, "per_seed": pt.per_seed,
                   "ok": pt.attainment >= cap.target, "_cand": c}
            done.append(row)
            if n == 1 and all(rate_key(p.rate) != rate_key(pt.rate) for p in c.job.search.points):
                c.job.search.record(pt)  # one replica at the target: a point of the replica's own curve
            if row["ok"] and (best is None or (cost, order) < (best["cost_per_hour"], best["_order"])):
                best = {**row, "_order": order}
            elif not row["ok"] and n0 <= n < n0 + dcfg.max_extra_replicas and (n + 1) * c.tp <= dcfg.max_gpus:
                queue.append(((n + 1) * c.replica_cost, order, c, n + 1, n0))
        queue.sort(key=lambda q: (q[0], q[1]))
    return done, best


def measure(plan: Plan, best: dict[str, Any]) -> RateSearch:
    """The chosen cluster's own capacity: starts at the (cached) verified target rate, grows by 25 %. The rate
    bounds are n times a replica's (``capacity.rate_max`` bounds one replica): a cluster verified at a target above
    it would otherwise be reported below the rate it met."""
    c, n = best["_cand"], best["replicas"]
    if n == 1:  # the chosen cluster is the replica already searched
        return c.job.search
    cap = plan.cap.model_copy(update={"rate_max": plan.cap.rate_max * n})
    search = RateSearch(cap, start=plan.dcfg.target_rate, growth=1.25, accelerate=True)
    plan.runner.drive([Job(search, lambda r: plan.configs(c, n, r), plan.cap.metric, label=f"{n} x {c.name}")])
    return search


def run_deploy(cfg: dict[str, Any], out_dir: str | Path, quiet: bool = False) -> dict[str, Any]:
    """The whole app on a plain config: ``deploy``, ``prices`` and ``capacity`` groups + the run groups. Progress
    goes to stderr unless ``quiet``; outputs are written to ``out_dir`` (created then) at the end."""
    t0 = time.perf_counter()
    cap = CapacityConfig.parse(cfg.get("capacity")).checked()
    dcfg = DeployConfig.parse(cfg.get("deploy"))
    if dcfg.target_rate < cap.rate_min:  # a replica missing at rate_min has capacity 0: never verified
        raise ConfigError(f"deploy.target_rate: expected a value >= capacity.rate_min ({cap.rate_min:g}), got "
                          f"{dcfg.target_rate:g}; a replica's capacity is searched from rate_min up, so lower "
                          "capacity.rate_min to size for a lower rate")
    prices = Prices.parse(cfg.get("prices"))
    base = base_config(cfg)
    check_metric(cap.metric, base)
    cands, skipped = enumerate_candidates(dcfg, prices.table(), base)
    if not cands:
        reasons = Counter(s["reason"] for s in skipped)
        raise ConfigError(f"deploy: no configuration left to simulate ({dict(reasons)}); widen deploy.gpus / "
                          "deploy.tp, add prices, or set deploy.allow_estimated_profiles=true")
    with SearchProgress("llmsim-deploy", enabled=not quiet) as progress:
        progress.phase(f"{len(cands)} candidates to search ({len(skipped)} skipped before simulating): "
                       "reading the workload")
        prompt, output = workload_means(base["workload"], cap.seed0)
        for c in cands:
            c.prior_rps = throughput_prior(c, prompt, output)
        # most promising first: the budget, when short, cuts the rest
        cands.sort(key=lambda c: (c.replica_cost / max(c.prior_rps, 1e-9), c.name))
        modes = rate_modes(base["workload"], cap.seed0)
        progress.phase(f"preflight ({PREFLIGHT_REQUESTS} requests on 1 x {cands[0].name})")
        preflight(run_config(base, cands[0].cluster(dcfg.model, 1), base["policy"], cap.rate_min, cap.seed0,
                             cap.num_requests, modes(cap.num_requests)))
        workers = min(cap.workers or cpu_count(), max(1, len(cands) * cap.seeds * cap.points_per_round))
        with Runner(workers, budget=dcfg.budget, progress=progress) as runner:
            plan = Plan(base, cap, dcfg, modes, runner)
            verified, best, measured = search_phases(plan, cands, progress)
        report = build_report(plan, cands, skipped, verified, best, measured, prices, time.perf_counter() - t0)
        progress.phase("writing deploy.json, deploy_candidates.csv, deploy_frontier.csv and deploy.png")
        write_outputs(report, Path(out_dir))
    if not quiet:
        print_report(report)
    return report


def search_phases(plan: Plan, cands: list[Candidate], progress: SearchProgress,
                  ) -> tuple[list[dict[str, Any]], dict[str, Any] | None, RateSearch | None]:
    """Replica searches, then verification, then the chosen cluster's own capacity, within the budget."""
    dcfg, cap, runner = plan.dcfg, plan.cap, plan.runner
    # keep some of the budget for the cluster runs: two verification rounds and the chosen one's search
    reserve = cap.seeds * ((2 * dcfg.verify_parallel if dcfg.verify else 0) + (4 if dcfg.measure_chosen else 0))
    runner.budget = dcfg.budget - min(reserve, dcfg.budget // 2)
    progress.phase(f"one-replica capacity of {len(cands)} candidate{'s' * (len(cands) > 1)}")
    search_replicas(plan, cands)
    runner.budget = dcfg.budget
    verified: list[dict[str, Any]] = []
    best = None
    if dcfg.verify:
        progress.phase(f"verifying the cheapest clusters whole at {dcfg.target_rate:g} req/s")
        verified, best = verify(plan, cands)
    measured = None
    if best is not None and dcfg.measure_chosen:
        progress.phase(f"capacity of the chosen cluster ({best['replicas']} x {best['candidate']})")
        measured = measure(plan, best)
    return verified, best, measured


__all__ = ["run_deploy", "search_phases", "search_replicas", "verify", "measure"]


if __name__ == "__main__":  # the app's old module command: say where it went rather than exit silently
    print("python -m llmsim.planning.deploy: error: the app is `llmsim-deploy` (or `python -m llmsim.cli.planning "
          "deploy`)", file=sys.stderr)
    raise SystemExit(2)
