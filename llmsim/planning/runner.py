"""Simulations for the searches: a process pool, a cache by config, a budget of runs, lockstep rounds, progress.

Searches advance in rounds: every active search asks for its next rates, all their seeds run as one batch, then
the results are recorded and a caller's ``on_round`` may stop searches (deploy's branch and bound). Lockstep rounds
make every decision independent of which simulation finishes first, hence the same result on any number of
workers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from llmsim.planning.progress import SearchProgress
from llmsim.planning.search import RateSearch, make_point
from llmsim.simulation.from_config import run_from_config

SUMMARY_KEYS = ("slo_attainment", "slo_ttft_attainment", "slo_tpot_attainment", "slo_e2el_attainment",
                "request_goodput", "request_throughput", "completed", "dropped", "p99_ttft_ms", "p99_tpot_ms",
                "mean_e2el_ms", "duration")


def evaluate(cfg: dict[str, Any], decode_skew: bool = True) -> dict[str, Any]:
    """One simulation (runs in a worker process): the figures the search and the curve need. ``decode_skew=False``
    runs it on profiles without their skewed-decode term (``capacity.decode_skew``)."""
    s = run_from_config(cfg, decode_skew=decode_skew).summary
    return {k: s.get(k) for k in SUMMARY_KEYS}


def cpu_count() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


class InlineExecutor(Executor):
    """workers=1: run in this process (no fork, same results; tests and profiling use it). Results are produced
    lazily, one per step of the iteration, as a process pool's ``map`` delivers them (so progress advances)."""

    def map(self, fn: Callable[..., Any], *iterables: Any, timeout: float | None = None,  # type: ignore[override]
            chunksize: int = 1) -> Any:
        return (fn(*args) for args in zip(*iterables))


@dataclass
class Job:
    """A search plus how to turn a rate into its per-seed run configs."""

    search: RateSearch
    configs: Callable[[float], list[dict[str, Any]]]
    metric: str = "slo_attainment"
    info: dict[str, Any] = field(default_factory=dict)
    label: str = ""  # what progress calls it ("a100x4 / jsq", "h100 tp1 chunked")


class Runner:
    """Simulations on a process pool, cached by config, counted, under an optional budget of runs.

    Searches advance in rounds: every active job asks for its next rates, all their seeds run as one batch,
    then results are recorded and ``on_round`` may stop jobs. Lockstep rounds make decisions independent of
    which simulation finishes first, hence deterministic on any number of workers.
    """

    def __init__(self, workers: int | None = None, fn: Callable[[dict[str, Any]], dict[str, Any]] = evaluate,
                 budget: int | None = None, progress: SearchProgress | None = None) -> None:
        self.workers = workers or cpu_count()
        self.fn = fn
        self.budget = budget
        self.progress = progress if progress is not None else SearchProgress("", enabled=False)
        self.cache: dict[str, dict[str, Any]] = {}
        self.runs = 0
        self.requests = 0
        self._pool: Executor | None = None

    def __enter__(self) -> Runner:
        self._pool = InlineExecutor() if self.workers == 1 else ProcessPoolExecutor(max_workers=self.workers)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._pool = None

    def new_runs(self, cfgs: list[dict[str, Any]]) -> int:
        return len({config_key(c) for c in cfgs} - set(self.cache))

    def map(self, cfgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Results in order; configs already run (or repeated in the batch) run once."""
        keys = [config_key(c) for c in cfgs]
        todo = {k: c for k, c in zip(keys, cfgs) if k not in self.cache}
        if todo:
            assert self._pool is not None, "Runner used outside its `with` block"
            self.progress.queue(len(todo))
            for k, r in zip(todo, self._pool.map(self.fn, list(todo.values()), chunksize=1)):
                self.cache[k] = r
                self.progress.advance()
            self.runs += len(todo)
            self.requests += sum(int(c["workload"].get("num_requests") or c["workload"].get("max_requests") or 0)
                                 for c in todo.values())
        return [self.cache[k] for k in keys]

    def drive(self, jobs: list[Job], on_round: Callable[[list[Job]], None] | None = None) -> None:
        """Run every job's search to the end (jobs earlier in the list win when the budget runs short)."""
        while True:
            batch: list[tuple[Job, float, list[dict[str, Any]]]] = []
            for job in jobs:
                for rate in job.search.next_rates():
                    batch.append((job, rate, job.configs(rate)))
            if not batch:
                return
            batch = self._within_budget(batch)
            self.progress.note(round_text(batch))
            results = self.map([c for _, _, cfgs in batch for c in cfgs])
            i = 0
            for job, rate, cfgs in batch:
                job.search.record(make_point(rate, results[i:i + len(cfgs)], job.metric))
                i += len(cfgs)
            if on_round is not None:
                on_round(jobs)

    def _within_budget(self, batch: list[tuple[Job, float, list[dict[str, Any]]]],
                       ) -> list[tuple[Job, float, list[dict[str, Any]]]]:
        if self.budget is None:
            return batch
        left = self.budget - self.runs
        kept, seen = [], set(self.cache)
        for job, rate, cfgs in batch:
            need = {config_key(c) for c in cfgs} - seen
            if job.search.done or len(need) > left:
                if not job.search.done:
                    job.search.stop(f"budget of {self.budget} runs exhausted")
                continue
            left -= len(need)
            seen |= need
            kept.append((job, rate, cfgs))
        return kept


def config_key(cfg: dict[str, Any]) -> str:
    """Runs with equal configs are one run (the cache key)."""
    return json.dumps(cfg, sort_keys=True, default=str)


def round_text(batch: list[tuple[Job, float, list[dict[str, Any]]]]) -> str:
    """What a round evaluates, for progress: one search's rates and what it knows, or how many rates of how many."""
    jobs = list(dict.fromkeys(id(job) for job, _, _ in batch))
    if len(jobs) != 1:
        return f"{len(batch)} rates of {len(jobs)} searches"
    job = batch[0][0]
    lo, hi = job.search.bracket()
    known = ([f"met at {lo:.3g}"] if lo is not None else []) + ([f"missed at {hi:.3g}"] if hi is not None else [])
    rates = ", ".join(f"{rate:.3g}" for _, rate, _ in batch)
    return (f"{job.label}: " if job.label else "") + f"rate {rates} req/s" + (f" ({', '.join(known)})" if known else "")
