"""The agents' commands answer a mistyped input up front in one line naming the key the user typed: a reference
policy the run does not evaluate, an unknown baseline router, a file given where a checkpoint directory belongs, an
export manifest that is not a JSON object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import llmsim.agents.evaluate as evaluate_app
from llmsim.agents.checkpoint_meta import read_meta
from llmsim.agents.evaluate import baseline_specs, checkpoint_specs, evaluate, run_app
from llmsim.envs.exported import MANIFEST, read_manifest
from llmsim.errors import ConfigError
from llmsim.resources import conf_dir

A_FILE = "a file, not a checkpoint directory (expected a directory holding checkpoint.json)"


def _cfg(overrides: list[str]) -> dict[str, Any]:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose(config_name="evaluate", overrides=["env.num_requests=20", "seeds=[2000]", "progress=false",
                                                         "plots=false", *overrides])
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def _no_episodes(*_: Any, **__: Any) -> Any:
    raise AssertionError("an episode ran before the config was checked")


def test_a_misspelt_reference_is_refused_before_any_episode(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(evaluate_app, "evaluate_described", _no_episodes)
    with pytest.raises(ConfigError) as e:
        run_app(_cfg(["baselines=[round_robin,jsq]", "reference=nope"]), tmp_path, quiet=True)
    assert str(e.value) == ("reference: 'nope' is not a policy of this evaluation; expected one of "
                            "['round_robin', 'jsq']")
    assert not (tmp_path / "evaluation.json").exists()


def test_a_reference_may_be_a_checkpoint_by_its_own_label(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "checkpoint.json").write_text(json.dumps({"format": 1, "agent": "ddqn"}))
    specs = checkpoint_specs([str(ckpt)]) + baseline_specs(["jsq"], "workload_router")
    evaluate_app.check_reference("ddqn", specs)  # checkpoint.json's agent: the label the policy reports
    evaluate_app.check_reference("round_robin", specs)  # the default left out: no gains, noted in the report
    with pytest.raises(ConfigError, match=r"^reference: 'sac' is not a policy .*\['ddqn', 'jsq'\]$"):
        evaluate_app.check_reference("sac", specs)


def test_an_unknown_baseline_names_the_key_typed() -> None:
    with pytest.raises(ConfigError, match=r"^baselines\[0\]: unknown routing policy 'nope'; expected one of \["):
        baseline_specs(["nope"], "workload_router")
    with pytest.raises(ConfigError, match=r"^baselines\[1\]\.name: unknown routing policy 'nope'"):
        baseline_specs(["jsq", {"name": "nope"}], "workload_router")


def test_a_file_given_as_a_checkpoint_says_a_directory_was_expected(tmp_path: Path) -> None:
    f = tmp_path / "passwd"
    f.write_text("root:x:0:0\n")
    with pytest.raises(ConfigError) as e:
        read_meta(f)  # trainer.resume / trainer.init_from / llmsim-export read it first
    assert str(e.value) == f"{f}: {A_FILE}"
    env = _cfg([])["env"]
    with pytest.raises(ConfigError) as e:
        evaluate(env, checkpoint_specs([str(f)]), [2000])
    assert str(e.value) == f"checkpoints: {f}: {A_FILE}"


@pytest.mark.parametrize("body,got", [("[]", "a list"), ('"x"', "a string"), ("null", "null")])
def test_an_export_manifest_that_is_not_an_object_says_what_it_is(tmp_path: Path, body: str, got: str) -> None:
    (tmp_path / MANIFEST).write_text(body)
    with pytest.raises(ConfigError) as e:
        read_manifest(tmp_path)
    assert str(e.value) == f"{tmp_path / MANIFEST}: expected a JSON object (an export's description), got {got}"
