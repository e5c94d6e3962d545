"""``trainer.stop_at_step``: a run stops at step K with last/ to resume from, and the resume ends as the run that
never stopped; the key is checked in one line. And last/ never keeps a replay older than its trainer.pt."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("stable_baselines3")

from llmsim.agents.checkpoint_files import REPLAY_FILE, TRAINER_FILE, read_tensors  # noqa: E402
from llmsim.agents.train import TrainingRun, summary_lines, train  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from tests.agents.helpers import assert_same_end, small_ddqn_config  # noqa: E402


def with_trainer(cfg: dict, **trainer: object) -> dict:
    return {**cfg, "trainer": {**cfg["trainer"], **trainer}}


@pytest.mark.parametrize(("num_envs", "stop"), [(1, 350), (2, 400)], ids=["one_env", "two_envs"])
def test_stopped_at_a_step_and_resumed_ends_as_the_run_that_never_stopped(num_envs: int, stop: int,
                                                                          tmp_path: Path) -> None:
    """Stopped between two evaluations (step 350: no evaluation there) or on one, mid-episode, then resumed from
    last/ with the same command line less the stop: the same weights, optimiser, replay, RNG states and rows."""
    cfg = small_ddqn_config(600, eval_every=200, num_envs=num_envs, save_replay=False)
    train(with_trainer(cfg, save_replay=True), tmp_path / "whole")
    meta = train(with_trainer(cfg, stop_at_step=stop), tmp_path / "stopped")
    assert meta["steps"] == stop and meta["stopped"] == {"step": stop, "stop_at_step": stop, "total_steps": 600}
    saved = read_tensors(tmp_path / "stopped" / "last" / TRAINER_FILE, "trainer state")
    assert saved["loop"]["step"] == stop and len(saved["resume"]["envs"][0]["actions"]) > 0  # mid-episode
    assert (tmp_path / "stopped" / "last" / REPLAY_FILE).is_file()  # whatever trainer.save_replay says
    assert [r["step"] for r in meta["evaluations"]] == [s for s in (200, 400) if s <= stop]
    assert summary_lines(meta, tmp_path / "stopped")[0].startswith(
        f"stopped at step {stop} of 600 (trainer.stop_at_step={stop}): continue with "
        f"trainer.resume={tmp_path / 'stopped' / 'last'}")
    resumed = train(with_trainer(cfg, save_replay=True, resume=str(tmp_path / "stopped" / "last")),
                    tmp_path / "resumed")
    assert resumed["steps"] == 600 and "stopped" not in resumed
    assert not [w for w in resumed["warnings"] if "trainer.resume" in w["message"]], resumed["warnings"]
    assert_same_end(tmp_path / "whole", tmp_path / "resumed", tmp_path / "stopped", stop, "q_net.pt")


@pytest.mark.parametrize(("trainer", "message"), [
    ({"stop_at_step": 700}, "trainer.stop_at_step=700: above trainer.total_steps=600; expected a step at most the "
                            "budget (the run stops there, with last/ to resume from)"),
    ({"stop_at_step": 0}, "trainer.stop_at_step: expected a value >= 1, got 0"),
    ({"stop_at_step": "half"}, "trainer.stop_at_step: expected "),
])
def test_a_bad_stop_is_one_line_naming_the_key(trainer: dict, message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        TrainingRun(with_trainer(small_ddqn_config(600), **trainer), tmp_path)
    assert "\n" not in str(e.value) and str(e.value).startswith(message), str(e.value)


def test_a_stop_the_resumed_checkpoint_has_passed_is_one_line(tmp_path: Path) -> None:
    train(small_ddqn_config(300), tmp_path / "first")
    last = tmp_path / "first" / "last"
    with pytest.raises(ConfigError) as e:
        TrainingRun(small_ddqn_config(600, resume=str(last), stop_at_step=300), tmp_path / "r")
    assert str(e.value) == (f"trainer.stop_at_step=300: trainer.resume={last} is already at step 300; expected a "
                            "later step (or no trainer.stop_at_step, to train to trainer.total_steps=600)")


def test_last_keeps_no_replay_older_than_its_trainer_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Resumed in its own directory without trainer.save_replay, a run's last/ drops the replay.npz of the first
    run (from an earlier step): a later resume says the replay refills instead of loading a stale one as exact."""
    train(small_ddqn_config(300, save_replay=True), tmp_path)
    assert (tmp_path / "last" / REPLAY_FILE).is_file()
    train(small_ddqn_config(600, save_replay=False, resume=str(tmp_path / "last")), tmp_path)
    assert not (tmp_path / "last" / REPLAY_FILE).exists()
    capsys.readouterr()
    train(small_ddqn_config(700, resume=str(tmp_path / "last")), tmp_path / "again")
    assert "no replay.npz (trainer.save_replay=false): the replay buffer refills" in capsys.readouterr().err
