"""The per-second engine timeline of a replay next to the measured one: where simulation and measurement diverge.

A vLLM-bench run of LLMServingSim records ``timeseries.csv`` next to its ``requests.jsonl``: per second since
the run started, ``running``, ``waiting`` and ``kv_cache_pct`` (vLLM's logger; this run's KV column is all zero,
so only the queues are compared). The simulated timeline (one scrape per second from the first arrival) is
shifted by the measured delay of the first arrival after the start (``meta.json`` ``started_at`` vs the first
``arrival_time``) and sampled at the measured seconds.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backend_bases import FigureCanvasBase
from matplotlib.figure import Figure

from llmsim.errors import TraceError, unwritable_folder


def read_timeseries(requests_path: str | Path) -> tuple[pd.DataFrame, float] | None:
    """(measured timeline, first arrival's offset from the run start in s) next to a requests file, if any."""
    p = Path(requests_path).parent / "timeseries.csv"
    if not p.is_file():
        return None
    try:
        df = pd.read_csv(p)
    except (ValueError, UnicodeDecodeError) as e:
        raise TraceError(f"{p}: not a readable CSV ({' '.join(str(e).split())})") from None
    missing = [c for c in ("t", "running", "waiting") if c not in df.columns]
    if missing:
        raise TraceError(f"{p}: needs columns t, running, waiting (missing {missing})")
    if df.empty:
        raise TraceError(f"{p}: no rows after the header; expected one row per second of the run")
    for c in ("t", "running", "waiting"):
        vals = pd.to_numeric(df[c], errors="coerce").to_numpy(float)
        bad = ~np.isfinite(vals) | (vals < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise TraceError(f"{p}: line {i + 2}: column {c!r}: expected a finite number >= 0, got {df[c].iloc[i]!r}")
    return df, _first_arrival_offset(Path(requests_path))


def _first_arrival_offset(requests_path: Path) -> float:
    """Seconds from the run's start (meta.json ``started_at``) to its first arrival; 0 when not recorded."""
    meta = requests_path.parent / "meta.json"
    try:
        started = datetime.fromisoformat(json.loads(meta.read_text())["started_at"].replace("Z", "+00:00"))
        with requests_path.open() as f:
            first = min(float(json.loads(line)["arrival_time"]) for line in f if line.strip())
        return max(0.0, first - started.timestamp())
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def align(sim: pd.DataFrame, measured: pd.DataFrame, offset: float) -> pd.DataFrame:
    """One row per measured second: the measured and the simulated running / waiting (and KV %) then."""
    s = sim.groupby("time").agg({"running": "sum", "waiting": "sum", "kv_used_blocks": "sum",
                                 "kv_total_blocks": "sum"})
    grid = s.index.to_numpy(float)
    rows = []
    for _, m in measured.iterrows():
        t_sim = float(m.t) - offset
        k = int(np.abs(grid - t_sim).argmin())  # the nearest scrape (both sample once a second)
        r = w = 0
        kv = 0.0
        if abs(grid[k] - t_sim) <= 1.0:  # (long after the simulation's last scrape nothing is left)
            row = s.iloc[k]
            r, w = int(row.running), int(row.waiting)
            kv = 100.0 * row.kv_used_blocks / row.kv_total_blocks
        rows.append({"t": float(m.t), "meas_running": int(m.running), "sim_running": r,
                     "meas_waiting": int(m.waiting), "sim_waiting": w,
                     "meas_kv_pct": float(m.get("kv_cache_pct", np.nan)), "sim_kv_pct": round(kv, 1)})
    return pd.DataFrame(rows)


def rmse(al: pd.DataFrame, lo: float = -np.inf, hi: float = np.inf) -> float:
    """Root mean square of the running and waiting differences over seconds ``lo`` .. ``hi``."""
    w = al[(al.t >= lo) & (al.t <= hi)]
    if w.empty:
        return float("nan")
    d = np.r_[w.sim_running - w.meas_running, w.sim_waiting - w.meas_waiting].astype(float)
    return float(np.sqrt(np.mean(d**2)))


def print_table(al: pd.DataFrame) -> None:
    print(f"{'t (s)':>6} {'running sim':>12} {'meas':>6} {'waiting sim':>12} {'meas':>6} {'KV % sim':>9} {'meas':>6}")
    for r in al.itertuples():
        kv = "-" if np.isnan(r.meas_kv_pct) else f"{r.meas_kv_pct:.1f}"
        print(f"{r.t:>6.0f} {r.sim_running:>12} {r.meas_running:>6} {r.sim_waiting:>12} {r.meas_waiting:>6} "
              f"{r.sim_kv_pct:>9.1f} {kv:>6}")
    print(f"rmse of running + waiting over the run: {rmse(al):.1f} requests")


def plot_path(text: str) -> Path:
    """An argparse type for ``--plot``: checked before the replay runs, not after it. The name must end in a format
    matplotlib writes (without one, matplotlib adds ``.png`` to another name than the one asked for), must not be a
    directory, and its nearest existing folder must take a new file (missing folders are made)."""
    p = Path(text)
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a directory; expected an image file name (timeline.png)")
    formats = FigureCanvasBase.get_supported_filetypes()
    if p.suffix[1:].lower() not in formats:
        raise argparse.ArgumentTypeError(f"{text}: expected an image file name ending in one of "
                                         f"{', '.join('.' + f for f in sorted(formats))}")
    problem = unwritable_folder(p)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{text}: {problem}")
    return p


def plot(al: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Measured and simulated running / waiting (/ KV %) against time, as an image at ``path`` (returned)."""
    kv_measured = bool(np.nan_to_num(al.meas_kv_pct).any())  # this run's logger left it at zero
    fig = Figure(figsize=(8, 7.2))  # no pyplot: no global figure state, no backend to choose
    axes = fig.subplots(3, 1, sharex=True)
    for ax, key, label in zip(axes, ("running", "waiting", "kv_pct"), ("running", "waiting", "KV cache %")):
        if key != "kv_pct" or kv_measured:
            ax.plot(al.t, al[f"meas_{key}"], label="measured (vLLM)", color="black")
        ax.plot(al.t, al[f"sim_{key}"], label="llmsim" if key != "kv_pct" or kv_measured else
                "llmsim (not in the measured timeseries)", color="tab:blue", linestyle="--")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper right")
    axes[2].legend(loc="upper right")
    axes[0].set_title(title or "replay timeline")
    axes[-1].set_xlabel("seconds since the run started")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out
