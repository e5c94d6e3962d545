"""What one simulation produced: per-request, drop, timeline and instance tables plus the summary, and how
they are saved (``requests.csv`` or ``.parquet``, ``dropped.csv``, ``timeline.csv``, ``instances.csv``,
``summary.json``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from llmsim.errors import ConfigError
from llmsim.metrics.table import RecordedRows


class SimResult:
    """The tables and summary of one run. ``requests`` is built the first time it is read (from the recorded
    rows the run hands over, :class:`~llmsim.metrics.table.RecordedRows`) and kept: a caller that reads only the
    summary never holds the table, which on a million requests is the largest thing a run leaves."""

    def __init__(self, requests: pd.DataFrame | RecordedRows, dropped: pd.DataFrame, timeline: pd.DataFrame,
                 instances: pd.DataFrame, summary: dict[str, Any], wall_s: float = 0.0, notes: list[str] | None = None,
                 requests_path: Path | None = None) -> None:
        self._requests = requests
        self.dropped = dropped
        self.timeline = timeline
        self.instances = instances
        self.summary = summary
        self.wall_s = wall_s
        self.notes = [] if notes is None else notes
        # the Parquet file the requests were streamed to (``requests`` is then empty)
        self.requests_path = requests_path

    @property
    def requests(self) -> pd.DataFrame:
        """One row per completed request, in id order (``requests.csv``)."""
        if isinstance(self._requests, RecordedRows):
            self._requests = self._requests.frame()  # built once; the recorded rows are let go
        return self._requests

    @requests.setter
    def requests(self, table: pd.DataFrame) -> None:
        self._requests = table

    def __repr__(self) -> str:
        built = "built" if isinstance(self._requests, pd.DataFrame) else "not built yet"
        return (f"SimResult(summary={self.summary!r}, requests table {built}, dropped={len(self.dropped)}, "
                f"wall_s={self.wall_s!r}, requests_path={self.requests_path!r})")

    def save(self, out_dir: str | Path, fmt: str = "csv") -> Path:
        """Write per-request table, drops, timeline, per-instance stats and summary.json. A streamed run's requests
        are in ``requests_path`` (Parquet, whatever ``fmt``): copied to ``requests.parquet`` unless they are there."""
        if fmt not in ("csv", "parquet"):  # before the directory is made: a refused save leaves nothing behind
            raise ConfigError(f"output.format: expected 'csv' or 'parquet', got {fmt!r}")
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if self.requests_path is not None:
            dest = out / "requests.parquet"
            if not (dest.exists() and dest.samefile(self.requests_path)):
                shutil.copyfile(self.requests_path, dest)
        elif fmt == "parquet":
            self.requests.to_parquet(out / "requests.parquet", index=False)
        else:
            self.requests.to_csv(out / "requests.csv", index=False)
        self.dropped.to_csv(out / "dropped.csv", index=False)
        self.timeline.to_csv(out / "timeline.csv", index=False)
        self.instances.to_csv(out / "instances.csv", index=False)
        (out / "summary.json").write_text(json.dumps(_jsonable(self.summary), indent=2) + "\n")
        return out


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if hasattr(v, "item"):
            v = v.item()
        if isinstance(v, float) and v != v:
            v = None
        out[k] = v
    return out
