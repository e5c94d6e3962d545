"""What the workload tests share: BurstGPT-shaped tables and files in the release layouts (the real CSVs are GitHub
release assets, not available here)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd

COLUMNS_12 = ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"]
COLUMNS_3 = ["Timestamp", "Session ID", "Elapsed time", "Model", "Request tokens", "Response tokens",
             "Total tokens", "Log Type"]


def burstgpt_rows(n: int = 400, seed: int = 0, start: int = 5) -> pd.DataFrame:
    """A BurstGPT-shaped table: sorted integer timestamps (ties included), ~8 % failures (0 response tokens)."""
    rng = np.random.default_rng(seed)
    ts = start + np.cumsum(rng.integers(0, 4, n))
    log_type = np.where(rng.random(n) < 0.3, "Conversation log", "API log")
    model = np.where(rng.random(n) < 0.7, "ChatGPT", "GPT-4")
    req = rng.integers(1, 3000, n)
    res = np.where(rng.random(n) < 0.08, 0, rng.integers(1, 800, n))
    session = [f"{rng.integers(1 << 30):08x}" if lt == "Conversation log" else "" for lt in log_type]
    return pd.DataFrame({"Timestamp": ts, "Session ID": session, "Elapsed time": rng.integers(0, 30, n),
                         "Model": model, "Request tokens": req, "Response tokens": res, "Total tokens": req + res,
                         "Log Type": log_type})


def write_burstgpt(path: Path, rows: pd.DataFrame | None = None, layout: str = "1", gz: bool = False) -> Path:
    """Write ``rows`` in the ``_1``/``_2`` (``layout="1"``) or ``_3`` column order, gzip-compressed if asked."""
    rows = burstgpt_rows() if rows is None else rows
    text = rows[COLUMNS_3 if layout == "3" else COLUMNS_12].to_csv(index=False)
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path
