"""Synthetic workloads: an arrival process paired with a length model, drawn in numpy batches."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.workload.arrivals import BATCH, ArrivalProcess
from llmsim.workload.base import Workload, WorkloadStats
from llmsim.workload.lengths import PairModel

MIX_FIELDS = ("task", "tenant", "slo_class")


def _check_mix(name: str, mix: Mapping[str, float] | None) -> tuple[list[str], np.ndarray] | None:
    if mix is None:
        return None
    if not mix:
        raise ConfigError(f"{name}: expected a non-empty mapping of label -> weight")
    labels = list(mix)
    w = np.array([float(mix[k]) for k in labels])
    if (w < 0).any() or w.sum() <= 0 or not np.isfinite(w).all():
        raise ConfigError(f"{name}: expected non-negative weights with a positive sum, got {dict(mix)}")
    return labels, w / w.sum()


class SyntheticWorkload(Workload):
    """Requests from ``arrival`` with lengths from ``lengths``, stopping at ``num_requests`` and/or
    ``duration`` seconds (at least one is needed unless the arrival schedule is finite).

    Arrivals, lengths and label mixes use independent child streams of ``seed`` so that, e.g.,
    changing the length model leaves the arrival times unchanged. ``task_mix`` / ``tenant_mix`` /
    ``slo_class_mix`` map labels to weights and set the matching request field.
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
    ) -> None:
        super().__init__()
        if num_requests is not None and (
            isinstance(num_requests, bool) or int(num_requests) != num_requests or num_requests < 0
        ):
            raise ConfigError(f"num_requests: expected a non-negative integer, got {num_requests!r}")
        if duration is not None and not (float(duration) > 0):
            raise ConfigError(f"duration: expected a positive number of seconds, got {duration!r}")
        if num_requests is None and duration is None and getattr(arrival, "repeat", True) is not False:
            raise ConfigError(
                "synthetic workload: expected 'num_requests' or 'duration' (the arrival process is endless)"
            )
        self.arrival = arrival
        self.lengths = lengths
        self.seed = int(seed)
        self.num_requests = None if num_requests is None else int(num_requests)
        self.duration = None if duration is None else float(duration)
        self.mixes = {
            f: m
            for f, m in zip(
                MIX_FIELDS,
                (
                    _check_mix("task_mix", task_mix),
                    _check_mix("tenant_mix", tenant_mix),
                    _check_mix("slo_class_mix", slo_class_mix),
                ),
            )
            if m is not None
        }
        self.batch = int(batch)

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
                    return
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
                for a, p, o, task, tenant, slo in zip(
                    times.tolist(), prompt.tolist(), output.tolist(), *cols
                ):
                    stats.yielded += 1
                    yield Request(next_id, a, p, o, task, tenant, slo)
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
                    return
            if done:
                stats.stopped = "duration"
                return
