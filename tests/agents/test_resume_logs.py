"""What a resume leaves in the run's logs: resumed in its own directory after an interruption, TensorBoard shows
each step once, with the values of the run that never stopped."""

from __future__ import annotations

import os
import socket
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("stable_baselines3")

from llmsim.agents import progress_log  # noqa: E402
from llmsim.agents import train as train_module  # noqa: E402
from llmsim.agents.train import train  # noqa: E402
from tests.agents.helpers import small_ddqn_config, train_killed_after_episode_past  # noqa: E402

WALL = ("wall_s", "steps_per_s")  # wall-clock scalars: the only ones a resume may change


def scalars(tb_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag's (step, value) points as TensorBoard shows them (all event files of the directory)."""
    accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator",
        reason="tensorboard (the rl extra) reads the event files")
    acc = accumulator.EventAccumulator(str(tb_dir), size_guidance={accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_a_run_resumed_in_its_own_directory_shows_each_step_once(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed after an episode past its checkpoint at step 400, then resumed in the same directory: the events the
    interrupted run wrote after the checkpoint are discarded, not shown beside the resumed run's."""
    cfg = small_ddqn_config(600, eval_every=200)
    train(cfg, tmp_path / "whole")
    train_killed_after_episode_past(cfg, tmp_path / "run", 400, monkeypatch)  # after the checkpoint at 400
    train({**cfg, "trainer": {**cfg["trainer"], "resume": str(tmp_path / "run" / "last")}}, tmp_path / "run")
    got, want = scalars(tmp_path / "run" / "tensorboard"), scalars(tmp_path / "whole" / "tensorboard")
    assert sorted(got) == sorted(want) and "rollout/ep_return" in got
    for tag, points in got.items():
        steps = [s for s, _ in points]
        assert not [s for s, n in Counter(steps).items() if n > 1], f"{tag}: steps shown twice"
        assert steps == [s for s, _ in want[tag]], tag
        if not tag.endswith(WALL):
            assert points == want[tag], tag


def test_without_tensorboard_a_run_logs_to_progress_csv_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(progress_log, "TENSORBOARD", False)
    monkeypatch.setattr(train_module, "TENSORBOARD", False)
    meta = train(small_ddqn_config(200), tmp_path)
    assert (tmp_path / "progress.csv").is_file() and not (tmp_path / "tensorboard").exists()
    assert ("llmsim-train: warning: tensorboard is not installed: this run logs to progress.csv only (pip install "
            "'llmsim[rl]')") in capsys.readouterr().err.splitlines()
    assert "tensorboard --logdir" not in train_module.summary_lines(meta, tmp_path)[-1]


def test_a_resumed_run_s_event_file_sorts_after_the_interrupted_one(tmp_path: Path) -> None:
    """TensorBoard reads event files in name order and names start with the second they were opened: one opened in
    the same second as the interrupted run's, with a per-process counter of 10 against 9, was read first, so its purge
    missed the events it replaces (steps shown twice)."""
    pytest.importorskip("tensorboard")
    interrupted = tmp_path / f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.9"
    interrupted.write_bytes(b"")
    resumed = progress_log.TensorBoardEvents(tmp_path, purge_step=5)
    resumed.close()
    names = sorted(p.name for p in tmp_path.glob("events.out.tfevents.*"))
    assert len(names) == 2 and names[0] == interrupted.name
