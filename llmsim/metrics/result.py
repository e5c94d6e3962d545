"""What one simulation produced: per-request, drop, timeline and instance tables plus the summary, and how
they are saved (``requests.csv`` or ``.parquet``, ``dropped.csv``, ``timeline.csv``, ``instances.csv``,
``summary.json``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from llmsim.errors import ConfigError


@dataclass
class SimResult:
    requests: pd.DataFrame
    dropped: pd.DataFrame
    timeline: pd.DataFrame
    instances: pd.DataFrame
    summary: dict[str, Any]
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    requests_path: Path | None = None  # the Parquet file the requests were streamed to (``requests`` is then empty)

    def save(self, out_dir: str | Path, fmt: str = "csv") -> Path:
        """Write per-request table, drops, timeline, per-instance stats and summary.json (a streamed run's
        requests are already in ``requests_path``)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if fmt not in ("csv", "parquet"):
            raise ConfigError(f"output.format must be 'csv' or 'parquet', got {fmt!r}")
        if self.requests_path is None and fmt == "parquet":
            self.requests.to_parquet(out / "requests.parquet", index=False)
        elif self.requests_path is None:
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
