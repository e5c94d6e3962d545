"""Synthetic workloads: an arrival process paired with a length model, drawn in numpy batches."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.workload.arrivals import BATCH, ArrivalProcess
from llmsim.workload.base import Workload, WorkloadStats, check_float, check_int
from llmsim.workload.lengths import PairModel

MIX_FIELDS = ("task", "tenant", "slo_class", "model")
# A stream bounded only by ``duration`` may not expect more requests than this: 1e12 requests is not a run
# that ends, so ask for num_requests instead of silently running for days.
MAX_DURATION_REQUESTS = 1e9


def _check_mix(name: str, mix: Mapping[str, float] | None) -> tuple[list[str], np.ndarray] | None:
    if mix is None:
        return None
    if not isinstance(mix, Mapping) or not mix:
        raise ConfigError(f"{name}: expected a non-empty mapping of label -> weight, got {mix!r}")
    labels = list(mix)
    w = np.array([check_float(f"{name}.{k}", mix[k], ge=0.0) for k in labels])
    if w.sum() <= 0:
        raise ConfigError(f"{name}: expected non-negative weights with a positive sum, got {dict(mix)}")
    return labels, w / w.sum()


def _check_bound(arrival: ArrivalProcess, num_requests: int | None, duration: float | None) -> None:
    """The stream must end: a request count, or a duration within which a sane number of requests arrive."""
    if num_requests is not None:
        return
    expected = arrival.expected_requests(duration)
    if duration is None and (expected is None or math.isinf(expected)):
        raise ConfigError(
            "synthetic workload: expected 'num_requests' or 'duration' (the arrival process is endless)"
        )
    if expected is not None and expected > MAX_DURATION_REQUESTS:
        span = "the whole arrival schedule" if duration is None else f"{duration:g} s of this arrival process"
        raise ConfigError(
            f"{'arrival' if duration is None else 'duration'}: {span} expects up to {expected:.3g} requests; "
            f"expected at most {MAX_DURATION_REQUESTS:.0e} without an explicit 'num_requests'"
        )


class SyntheticWorkload(Workload):
    """Requests from ``arrival`` with lengths from ``lengths``, stopping at ``num_requests`` and/or
    ``duration`` seconds (at least one is needed unless the arrival schedule is finite).

    Arrivals, lengths and label mixes use independent child streams of ``seed`` so that, e.g.,
    changing the length model leaves the arrival times unchanged. ``task_mix`` / ``tenant_mix`` /
    ``slo_class_mix`` / ``model_mix`` map labels to weights and set the matching request field (``model_mix``:
    the model each request must be served by, for multi-model clusters).
    """

    kind = "synthetic"

    def __init__(
        self,
        arrival: ArrivalProcess,
        lengths: PairModel,
        seed: int = 0,
        num_requests: int | None = None,
        duration: float | None = None,
        task_mix: Mapping[str, float] | None = None,
        tenant_mix: Mapping[str, float] | None = None,
        slo_class_mix: Mapping[str, float] | None = None,
        batch: int = BATCH,
        model_mix: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(arrival, ArrivalProcess):
            raise ConfigError(f"arrival: expected an ArrivalProcess (GammaArrivals, ...), got {arrival!r}")
        if not isinstance(lengths, PairModel):
            raise ConfigError(f"lengths: expected a PairModel (Independent, Empirical, ...), got {lengths!r}")
        self.num_requests = None if num_requests is None else check_int("num_requests", num_requests, ge=1)
        self.duration = None if duration is None else check_float("duration", duration, gt=0.0)
        _check_bound(arrival, self.num_requests, self.duration)
        self.arrival = arrival
        self.lengths = lengths
        self.seed = check_int("seed", seed, ge=0)
        self.mixes = {
            f: m
            for f, m in zip(
                MIX_FIELDS,
                (
                    _check_mix("task_mix", task_mix),
                    _check_mix("tenant_mix", tenant_mix),
                    _check_mix("slo_class_mix", slo_class_mix),
                    _check_mix("model_mix", model_mix),
                ),
            )
            if m is not None
        }
        self.batch = check_int("batch", batch, ge=1)

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "kind": self.kind,
            "seed": self.seed,
            "arrival": self.arrival.describe(),
            "lengths": self.lengths.describe(),
            "num_requests": self.num_requests,
            "duration": self.duration,
        }
        for f, (labels, w) in self.mixes.items():
            d[f"{f}_mix"] = dict(zip(labels, w.tolist()))
        return d

    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
        arr_seq, len_seq, mix_seq = np.random.SeedSequence(self.seed).spawn(3)
        arr_rng = np.random.default_rng(arr_seq)
        len_rng = np.random.default_rng(len_seq)
        mix_rng = np.random.default_rng(mix_seq)
        remaining = self.num_requests
        next_id = 0
        for times in self.arrival.batches(arr_rng, self.batch):
            if remaining is not None and times.size > remaining:
                times = times[:remaining]
            if self.duration is not None and times.size and times[-1] >= self.duration:
                times = times[times < self.duration]
                if times.size == 0:
                    stats.stopped = "duration"
                    break
                done = True
            else:
                done = False
            n = times.size
            prompt, output = self.lengths.sample(len_rng, n)
            stats.rows_read += n
            labels = {
                f: [lab[i] for i in mix_rng.choice(len(lab), size=n, p=w).tolist()]
                for f, (lab, w) in self.mixes.items()
            }
            if labels:
                cols = [labels.get(f, [None] * n) for f in MIX_FIELDS]
                for a, p, o, task, tenant, slo, model in zip(
                    times.tolist(), prompt.tolist(), output.tolist(), *cols
                ):
                    stats.yielded += 1
                    yield Request(next_id, a, p, o, task, tenant, slo, model=model)
                    next_id += 1
            else:
                for a, p, o in zip(times.tolist(), prompt.tolist(), output.tolist()):
                    stats.yielded += 1
                    yield Request(next_id, a, p, o)
                    next_id += 1
            if remaining is not None:
                remaining -= n
                if remaining <= 0:
                    stats.stopped = "num_requests"
                    break
            if done:
                stats.stopped = "duration"
                break
        if stats.yielded == 0:  # a complete pass that drew nothing is an error, never a silent empty run
            before = "" if self.duration is None else f" before duration={self.duration} s"
            raise ConfigError(f"synthetic workload: expected at least one request, got none (the arrival process "
                              f"{self.arrival.describe()} produced no arrival{before}; raise the rate or the duration)")
