"""Training that tells the truth: a budget below learning_starts, a best/ from before any gradient step, and a
score printed with what it is made of; configs are checked with one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from llmsim.agents.ddqn import DDQNConfig  # noqa: E402
from llmsim.agents.scoring import LOST_REQUEST_MS, eval_score, explain_score  # noqa: E402
from llmsim.agents.train import TrainingRun, budget_warning, summary_lines, train  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402

SMALL_ENV = {"id": "workload_router", "num_requests": 30, "rate": 20.0,
             "reward": {"kind": "workload_aware", "guidance": 0.0}}


def _cfg(total: int, learning_starts: int) -> dict:
    agent = {"name": "ddqn", "hidden": [16], "batch_size": 32, "learning_starts": learning_starts, "buffer_size": 2000}
    trainer = {"total_steps": total, "eval_every": 0, "eval_seeds": [500], "progress": False}
    return {"env": dict(SMALL_ENV), "agent": agent, "trainer": trainer}


def test_budget_below_learning_starts_warns_and_best_says_it_is_untrained(tmp_path: Path, capsys) -> None:
    meta = train(_cfg(200, 5000), tmp_path)
    err = capsys.readouterr().err
    assert "llmsim-train: warning: trainer.total_steps=200 is below agent.learning_starts=5000" in err
    assert "before the first gradient step" in err and "untrained" in err
    assert meta["updates"] == 0 and meta["best_untrained"] is True
    assert all(e["updates"] == 0 for e in meta["evaluations"])


def test_a_budget_that_learns_has_no_budget_warning(tmp_path: Path, capsys) -> None:
    meta = train(_cfg(300, 100), tmp_path)
    err = capsys.readouterr().err
    # 300 steps learn (gradient steps are taken) but not enough to route: the only warnings left say so
    warnings = [ln for ln in err.splitlines() if "warning" in ln]
    assert all("collapsed to" in ln for ln in warnings), err
    assert [w["message"] for w in meta["warnings"]] == [ln.split(": ", 3)[3] for ln in warnings]
    assert meta["updates"] > 0 and "best_untrained" not in meta
    assert budget_warning(300, DDQNConfig(learning_starts=100, batch_size=32)) is None
    assert "agent.batch_size=512" in budget_warning(300, DDQNConfig(learning_starts=100))


def test_a_huge_negative_score_is_explained_beside_it() -> None:
    row = {"mean_e2el_ms": 12_345.0, "dropped": 355.0, "step": 20000, "score": 0.0}
    row["score"] = eval_score("mean_e2el_ms", row["mean_e2el_ms"], row["dropped"])
    assert row["score"] == pytest.approx(-3.55e11, rel=1e-3)
    why = explain_score("mean_e2el_ms", row, "workload_aware")
    assert "355" in why and f"{LOST_REQUEST_MS:.0e}" in why and "lost" in why
    meta = {"label": "ddqn", "steps": 20000, "episodes": 10, "updates": 100, "wall_s": 1.0, "eval_metric":
            "mean_e2el_ms", "best_score": row["score"], "evaluations": [row], "env": SMALL_ENV}
    best_line = summary_lines(meta, Path("run"))[1]
    assert "score -3.55e+11 at step 20000 (score = -mean_e2el_ms - 1e+09 x lost requests" in best_line
    assert "return" in explain_score("return", {"dropped": 0.0}, "latency")


@pytest.mark.parametrize("agent,needle", [
    ({"name": "ddqn", "batch_size": 1.5}, "agent.batch_size: expected an integer"),
    ({"name": "ddqn", "gamma": 2}, "agent.gamma: expected a value <= 1"),
    ({"name": "ddqn", "guidance": "hurl"}, "agent.guidance"),
    ({"name": "sac", "encoder": "gcn"}, "agent.encoder"),
])
def test_agent_config_errors_name_the_key(tmp_path: Path, agent: dict, needle: str) -> None:
    cfg = _cfg(100, 50)
    cfg["agent"] = agent
    with pytest.raises(ConfigError, match=needle):
        train(cfg, tmp_path)


def test_trainer_typo_names_the_key(tmp_path: Path) -> None:
    cfg = _cfg(100, 50)
    cfg["trainer"]["eval_evry"] = 10
    with pytest.raises(ConfigError, match="trainer: unknown key 'eval_evry' \\(did you mean 'eval_every'\\?\\)"):
        train(cfg, tmp_path)


BEST_EFFORT_SMALL = {"id": "best_effort", "num_requests": 20}


def _from(key: str, src: str, agent: dict) -> dict:
    trainer = {"total_steps": 40, "eval_every": 0, "eval_seeds": [1000], "progress": False, key: src}
    return {"env": dict(BEST_EFFORT_SMALL), "agent": agent, "trainer": trainer}


@pytest.mark.parametrize("key", ["init_from", "resume"])
def test_starting_from_a_checkpoint_of_another_network_kind_is_one_line(tmp_path: Path, key: str) -> None:
    """The shipped BestEffort router is a guided network (it keeps its fallback margin as a buffer): a plain DDQN
    agent of the same widths used to fail inside torch's load_state_dict with a traceback; ``zoo:<name>`` was not
    taken as the checkpoint directory docs/zoo.md says it is."""
    agent = {"name": "ddqn", "hidden": [256, 256], "batch_size": 32, "learning_starts": 1000, "buffer_size": 2000}
    with pytest.raises(ConfigError, match=rf"^trainer.{key}=zoo:best_effort: its network does not fit this ddqn "
                                          r"agent's \(the file has fallback_margin, which the network does not; "
                                          r"its config.yaml has the agent it was trained with\)$"):
        train(_from(key, "zoo:best_effort", agent), tmp_path)


@pytest.mark.parametrize("key", ["init_from", "resume"])
@pytest.mark.parametrize("what,needle", [
    ("file", "a file, not a checkpoint directory"),
    ("empty", "not a checkpoint directory \\(no checkpoint.json\\)"),
    ("zoo:nope", "no such router in the zoo"),
])
def test_starting_from_what_is_no_checkpoint_names_the_key(tmp_path: Path, key: str, what: str, needle: str) -> None:
    """A file, a folder without checkpoint.json or an unknown zoo name: one line that says which key named it."""
    src = {"file": tmp_path / "q_net.pt", "empty": tmp_path / "empty"}.get(what, what)
    if what == "file":
        src.write_text("x")  # type: ignore[union-attr]
    elif what == "empty":
        src.mkdir()  # type: ignore[union-attr]
    agent = {"name": "ddqn", "hidden": [16], "batch_size": 32, "learning_starts": 1000, "buffer_size": 2000}
    with pytest.raises(ConfigError, match=rf"^trainer.{key}: .*{needle}"):
        train(_from(key, str(src), agent), tmp_path / "run")


def test_init_from_takes_a_zoo_name(tmp_path: Path) -> None:
    from llmsim.agents import zoo
    from llmsim.errors import load_yaml_file

    agent = load_yaml_file(zoo.checkpoint_dir("zoo:best_effort") / "config.yaml")["agent"]
    agent.update(learning_starts=1000, buffer_size=2000, demo_steps=0)
    meta = train(_from("init_from", "zoo:best_effort", agent), tmp_path)
    assert meta["steps"] == 40


def test_choosing_best_on_test_seeds_warns(tmp_path: Path, capsys) -> None:
    """docs/evaluation.md: test seeds (2000 and up) are for what is reported, never for choosing a checkpoint;
    trainer.eval_seeds=[2000] used to pass without a word."""
    cfg = _cfg(60, 5000)
    cfg["trainer"]["eval_seeds"] = [1000, 2001]
    meta = train(cfg, tmp_path)
    want = ("trainer.eval_seeds [1000, 2001] include test seeds (2000 and up): best/ is chosen on them, so a test "
            "on them is no longer held out (use validation seeds 1000-1999)")
    assert f"llmsim-train: warning: {want}" in capsys.readouterr().err
    assert want in [w["message"] for w in meta["warnings"]]


def test_the_score_names_the_reward_the_env_used(tmp_path: Path) -> None:
    """A config naming no reward kind trains on the env's default; the summary names it, never "None"."""
    cfg = _cfg(100, 50)
    cfg["env"].pop("reward")
    meta = train(cfg, tmp_path)
    assert meta["reward_kind"] == "workload_aware"  # the testbed's own reward
    line = summary_lines(meta, tmp_path)[1]
    assert "the env reward 'workload_aware' summed over an episode" in line, line
    row = {"step": 1, "score": -1.0, "dropped": 0.0}
    old = {"label": "ddqn", "steps": 1, "episodes": 1, "updates": 0, "wall_s": 1.0, "eval_metric": "return",
           "best_score": -1.0, "evaluations": [row], "env": {"id": "workload_router", "reward": {"guidance": 0}}}
    line = summary_lines(old, tmp_path)[1]  # a training.json of before reward_kind: no kind to name
    assert "the env's default reward summed over an episode" in line and "None" not in line, line


def test_an_eval_metric_no_evaluation_can_score_is_refused_before_training(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A misspelt metric is one line naming the key before the first step, not after a whole budget of training
    at the first (here: the only, final) evaluation."""
    cfg = _cfg(100, 50)
    cfg["trainer"]["eval_metric"] = "p99_e2e_ms"
    monkeypatch.setattr(TrainingRun, "start_loop", lambda *a: pytest.fail("training started"))
    with pytest.raises(ConfigError) as e:
        train(cfg, tmp_path)
    assert str(e.value).startswith("trainer.eval_metric='p99_e2e_ms': not return or a metric of the run summary "
                                   "(did you mean 'p99_e2el_ms'?); e.g. "), str(e.value)
    assert "\n" not in str(e.value)
