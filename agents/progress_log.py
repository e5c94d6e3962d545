"""The training run's log: progress.csv and TensorBoard events through stable-baselines3's logger, with columns
in a stable order so reruns write byte-identical files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stable_baselines3.common.logger import CSVOutputFormat, Logger, make_output_format

from llmsim.agents.base import LoopState


class _SortedKeys(list):
    """CSV columns that grow in sorted order: stable-baselines3 adds a row's new keys as a set difference, whose
    order follows string hashing, so progress.csv's columns would change from one process to the next."""

    def extend(self, keys: Any) -> None:
        super().extend(sorted(keys))


def csv_output(run_dir: Path) -> CSVOutputFormat:
    """progress.csv with the same columns in the same order for the same run (byte-identical reruns)."""
    out = CSVOutputFormat(str(run_dir / "progress.csv"))
    out.keys = _SortedKeys(out.keys)
    return out


def make_logger(run_dir: Path) -> Logger:
    """stable-baselines3's logger writing progress.csv and TensorBoard events under ``run_dir``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    return Logger(str(run_dir), [csv_output(run_dir),
                                 make_output_format("tensorboard", str(run_dir / "tensorboard"))])


def log_episode(logger: Logger, st: LoopState, info: dict[str, Any]) -> None:
    """An episode's return and its run summary's headline latencies, under ``rollout/`` at the current step."""
    logger.record("rollout/ep_return", st.returns[-1])
    summary = info.get("summary") or {}
    for k in ("mean_e2el_ms", "p99_e2el_ms", "mean_ttft_ms", "dropped", "duration"):
        if summary.get(k) is not None:
            logger.record(f"rollout/{k}", summary[k])
    logger.record("rollout/episodes", st.episode)
    logger.dump(st.step)


