"""The training run's log: progress.csv and TensorBoard events through stable-baselines3's logger, with columns
in a stable order so reruns write byte-identical files. A run resumed in its own directory shows each step once in
both: progress.csv drops the rows written after the checkpoint, TensorBoard the events."""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

from stable_baselines3.common.logger import CSVOutputFormat, KVWriter, Logger, TensorBoardOutputFormat

from llmsim.agents.base import LoopState

try:
    from torch.utils.tensorboard import SummaryWriter
except ImportError:  # tensorboard (the rl extra) is missing: progress.csv only, said by the training run
    SummaryWriter = None

TENSORBOARD = SummaryWriter is not None


class _SortedKeys(list):
    """CSV columns that grow in sorted order: stable-baselines3 adds a row's new keys as a set difference, whose
    order follows string hashing, so progress.csv's columns would change from one process to the next."""

    def extend(self, keys: Any) -> None:
        super().extend(sorted(keys))


def rows_until(path: Path, step: int, episodes: int) -> tuple[list[str], list[str]]:
    """progress.csv's columns and its lines up to a checkpoint after ``step`` env steps and ``episodes``
    episodes: the rows before the first one of a later episode (``rollout/episodes``) or evaluation
    (``eval/step``)."""
    text = path.read_text().splitlines()
    if not text:
        return [], []
    keys = next(csv.reader(text[:1]))
    kept = []
    for line, row in zip(text[1:], csv.reader(text[1:])):
        values = dict(zip(keys, row))
        past = [float(values[k]) > limit for k, limit in (("rollout/episodes", episodes), ("eval/step", step))
                if values.get(k)]
        if any(past):
            break
        kept.append(line)
    return keys, kept


def csv_output(run_dir: Path, upto: tuple[int, int] | None = None) -> CSVOutputFormat:
    """progress.csv with the same columns in the same order for the same run (byte-identical reruns); ``upto``
    (step, episodes): a run resumed in its own directory keeps the rows up to its checkpoint (stable-baselines3
    would start the file afresh) and drops those the interrupted run wrote after it, which the resume writes
    again."""
    path = run_dir / "progress.csv"
    keys, kept = rows_until(path, *upto) if upto is not None and path.is_file() else ([], [])
    out = CSVOutputFormat(str(path))
    out.keys = _SortedKeys(keys)
    if keys:
        out.file.write("\n".join([",".join(keys), *kept]) + "\n")
        out.file.flush()
    return out


class TensorBoardEvents(TensorBoardOutputFormat):
    """stable-baselines3's TensorBoard output, whose event file starts by purging from ``purge_step`` on: TensorBoard
    then discards the events of the earlier files of the directory from that step (those an interrupted run wrote
    after the checkpoint a resume starts from, which the resume writes again)."""

    def __init__(self, folder: Path, purge_step: int | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        if purge_step is not None:
            wait_for_a_later_event_file_name(folder)
        self.writer = SummaryWriter(log_dir=str(folder), purge_step=purge_step)
        self._is_closed = False


def wait_for_a_later_event_file_name(folder: Path, limit_s: float = 2.0) -> None:
    """Until this second is later than every event file's in ``folder``. TensorBoard reads a directory's event files
    in name order and the purge applies to files read before it; names start with the second they were opened, then
    a per-process counter that sorts as text (10 before 9), so a file opened in the same second as the interrupted
    run's could be read first and its purge miss the events it replaces. Bounded: a clock set back waits at most
    ``limit_s``."""
    seconds = [int(p.name.split(".")[3]) for p in folder.glob("events.out.tfevents.*")
               if len(p.name.split(".")) > 3 and p.name.split(".")[3].isdigit()]
    deadline = time.monotonic() + limit_s
    while seconds and int(time.time()) <= max(seconds) and time.monotonic() < deadline:
        time.sleep(0.05)


def make_logger(run_dir: Path, upto: tuple[int, int] | None = None) -> Logger:
    """stable-baselines3's logger writing progress.csv (see :func:`csv_output`) and, with tensorboard installed,
    TensorBoard events under ``run_dir``; ``upto`` (step, episodes): a resume from a checkpoint after ``step`` env
    steps, whose events replace those of later steps."""
    run_dir.mkdir(parents=True, exist_ok=True)
    outputs: list[KVWriter] = [csv_output(run_dir, upto)]
    if TENSORBOARD:
        outputs.append(TensorBoardEvents(run_dir / "tensorboard", None if upto is None else upto[0] + 1))
    return Logger(str(run_dir), outputs)


def log_episode(logger: Logger, st: LoopState, info: dict[str, Any]) -> None:
    """An episode's return and its run summary's headline latencies, under ``rollout/`` at the current step."""
    logger.record("rollout/ep_return", st.returns[-1])
    summary = info.get("summary") or {}
    for k in ("mean_e2el_ms", "p99_e2el_ms", "mean_ttft_ms", "dropped", "duration"):
        if summary.get(k) is not None:
            logger.record(f"rollout/{k}", summary[k])
    logger.record("rollout/episodes", st.episode)
    logger.dump(st.step)


