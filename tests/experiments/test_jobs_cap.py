"""``--jobs`` above the CPUs this process may use is cut to them, with a note, by one helper that ``llmsim-reproduce``,
every study and the testbed calibration share: more workers than CPUs only add processes, each with its own memory."""

from __future__ import annotations

import importlib

import pytest

from experiments.harness.pool import cap_jobs

STUDIES = ("guide_choice", "load_gate", "load_gate_guide", "past_only_rollout", "rollout_distill",
           "rollout_headroom", "rollout_labels", "spill_load")


def test_cap_jobs_cuts_to_the_cpus_with_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    assert cap_jobs(8, "prog", cpus=2) == 2
    assert capsys.readouterr().err == "prog: note: --jobs 8 is more than the 2 CPU(s) this process may use; running 2\n"
    assert cap_jobs(2, "prog", cpus=2) == 2 and cap_jobs(1, "prog", cpus=4) == 1
    assert capsys.readouterr().err == ""
    assert 1 <= cap_jobs(10**6, "prog") < 10**6  # counted when not given


class _Parsed(Exception):
    """Raised by the stand-in cap: the study parsed its arguments and asked for the cap."""


@pytest.mark.parametrize("module", [f"experiments.studies.{s}" for s in STUDIES] + ["experiments.testbeds.calibrate"])
def test_every_study_caps_its_jobs(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = importlib.import_module(module)
    asked: list[tuple[int, str]] = []

    def cap(jobs: int, prog: str, cpus: int | None = None) -> int:
        asked.append((jobs, prog))
        raise _Parsed

    monkeypatch.setattr(mod, "cap_jobs", cap)
    argv = ["--jobs", "64"] + (["--seeds", "500"] if module.endswith("rollout_labels") else [])
    with pytest.raises(_Parsed):
        mod.main(argv)
    assert asked == [(64, f"python -m {module}")]
