"""Requests streamed to Parquet (``output.stream: parquet``, ``simulate(stream_to=...)``): the file holds the
requests table's rows, the summary is byte-identical to the unstreamed run's, a bad path is one line."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from llmsim import InstanceConfig, simulate
from llmsim.cluster import Cluster
from llmsim.errors import ConfigError
from llmsim.metrics.result import SimResult
from llmsim.metrics.stream import StreamedRecorder
from llmsim.routing import make_router
from llmsim.schema import SLO
from llmsim.simulation.from_config import run_from_config
from llmsim.simulation.run import collect
from llmsim.testing import LinearProfile, requests
from tests.simulation.test_conservation import composed

pytestmark = pytest.mark.timeout(120)


def _rows(n: int = 300, seed: int = 0) -> list[tuple[float, int, int]]:
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(0.01, n))
    return [(float(t), int(p), int(o)) for t, p, o in zip(times, rng.integers(10, 600, n), rng.integers(1, 120, n))]


def _classed(n: int, classes: bool):
    reqs = requests(_rows(n))
    if classes:
        for r in reqs[n // 3:]:  # the first requests have no class: the column appears mid-run
            r.slo_class = "fast" if r.id % 2 else "slow"
    return reqs


def _run(n: int, slo: SLO, classes: bool, stream_to=None, row_group: int = 64) -> SimResult:
    """``simulate``'s steps, with small row groups when streaming (many flushes in a short run)."""
    insts = [InstanceConfig(profile=LinearProfile()) for _ in range(3)]
    recorder = StreamedRecorder(stream_to, row_group) if stream_to is not None else None
    cluster = Cluster(insts, make_router("round_robin"), recorder=recorder)
    cluster.run(_classed(n, classes))
    return collect(cluster, slo)


def _summary_text(res: SimResult, tmp_path, name: str) -> bytes:
    res.save(tmp_path / name)
    return (tmp_path / name / "summary.json").read_bytes()


@pytest.mark.parametrize("classes", [False, True])
def test_streamed_rows_equal_the_table_and_the_summary_is_byte_identical(tmp_path, classes: bool) -> None:
    slo = SLO.parse({"ttft_ms": 400.0, "classes": {"fast": {"e2el_ms": 3000.0}, "slow": {"tpot_ms": 40.0}}}
                    if classes else {"ttft_ms": 400.0, "e2el_ms": 5000.0})
    plain = _run(400, slo, classes)
    path = tmp_path / "requests.parquet"
    streamed = _run(400, slo, classes, stream_to=path)
    assert _summary_text(streamed, tmp_path, "s") == _summary_text(plain, tmp_path, "p")
    assert streamed.requests.empty and streamed.requests_path == path
    assert not (tmp_path / "s" / "requests.csv").exists()  # the streamed file is the requests table
    got = pd.read_parquet(path)
    assert len(got) == len(plain.requests) == 400
    got = got.sort_values("id", kind="stable").reset_index(drop=True)
    if not classes:  # the file always has both label columns (null when no request has one)
        assert got["task"].isna().all() and got["slo_class"].isna().all()
        got = got.drop(columns=["task", "slo_class"])
    else:
        assert got["task"].isna().all()
        got = got.drop(columns=["task"])
    pd.testing.assert_frame_equal(got, plain.requests)


def test_a_run_with_no_completion_still_writes_the_file(tmp_path) -> None:
    path = tmp_path / "requests.parquet"
    res = simulate([InstanceConfig(profile=LinearProfile())], [], "round_robin", stream_to=path)
    assert res.summary["completed"] == 0 and len(pd.read_parquet(path)) == 0


def test_a_bad_stream_path_is_one_line_naming_the_key(tmp_path) -> None:
    with pytest.raises(ConfigError) as e:
        simulate([InstanceConfig(profile=LinearProfile())], requests(_rows(5)), "round_robin",
                 stream_to=tmp_path / "no" / "such" / "dir" / "requests.parquet")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("stream_to: cannot write") and "no/such/dir" in msg


def test_output_stream_writes_requests_parquet_in_the_run_directory(tmp_path) -> None:
    base = ["workload.num_requests=120", "output.plots=false", "seed=2"]
    plain = run_from_config(composed(base), tmp_path / "plain")
    streamed = run_from_config(composed([*base, "output.stream=parquet"]), tmp_path / "streamed")
    assert (tmp_path / "streamed" / "summary.json").read_bytes() == (tmp_path / "plain" / "summary.json").read_bytes()
    got = pd.read_parquet(tmp_path / "streamed" / "requests.parquet").sort_values("id", kind="stable")
    assert got["id"].tolist() == plain.requests["id"].tolist() and streamed.requests_path is not None
    assert json.loads((tmp_path / "streamed" / "summary.json").read_text())["completed"] == 120


def test_output_stream_needs_an_output_directory() -> None:
    with pytest.raises(ConfigError, match=r"^output.stream: .*output.save: true"):
        run_from_config(composed(["workload.num_requests=10", "output.stream=parquet"]), None)


@pytest.mark.parametrize("name, suffix", [("requests.csv", "'.csv'"), ("requests", "'no suffix'"),
                                          ("requests.parquet.gz", "'.gz'")])
def test_a_stream_path_not_named_parquet_is_refused_before_the_run(tmp_path, name, suffix) -> None:
    path = tmp_path / name
    with pytest.raises(ConfigError) as e:
        simulate([InstanceConfig(profile=LinearProfile())], requests(_rows(5)), "round_robin", stream_to=path)
    msg = str(e.value)
    assert msg.startswith("stream_to: ") and name in msg and "Parquet only" in msg and suffix in msg
    assert "\n" not in msg and not path.exists()


def test_a_stream_path_with_an_upper_case_suffix_is_parquet(tmp_path) -> None:
    path = tmp_path / "requests.PARQUET"
    res = simulate([InstanceConfig(profile=LinearProfile())], requests(_rows(5)), "round_robin", stream_to=path)
    assert len(pd.read_parquet(path)) == res.summary["completed"] == 5


def test_saving_a_run_streamed_elsewhere_puts_its_requests_in_the_output_directory(tmp_path) -> None:
    path = tmp_path / "elsewhere.parquet"
    res = simulate([InstanceConfig(profile=LinearProfile())], requests(_rows(5)), "round_robin", stream_to=path)
    out = res.save(tmp_path / "run", "csv")
    assert sorted(p.name for p in out.iterdir()) == ["dropped.csv", "instances.csv", "requests.parquet",
                                                     "summary.json", "timeline.csv"]
    assert pd.read_parquet(out / "requests.parquet").equals(pd.read_parquet(path))
