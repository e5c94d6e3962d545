"""``llmsim-reproduce``: the verdict rules on crafted values, spec 001's claims end to end at a tiny size (train,
evaluate, claims; then the same checkpoints again through --from-runs), and bad input as one line with exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from experiments import reproduce
from experiments.papers.intelligent_router import REFERENCE, VARIANTS, claims
from experiments.reproduce import KEYS, VERDICTS, gain_verdict, order_verdict, tolerance

ROOT = Path(__file__).resolve().parents[1]


def _cli(args: list[str], size: str = "tiny", timeout: int = 110) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LLMSIM_REPRODUCE_SIZE": size, "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "experiments.reproduce", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


# ---------------------------------------------------------------------- verdict rules
def test_tolerance_band() -> None:
    assert tolerance(2.0) == 1.0            # the absolute floor
    assert tolerance(11.43) == pytest.approx(0.25 * 11.43)
    assert tolerance(-8.0) == 2.0


@pytest.mark.parametrize(("paper", "measured", "expected"), [
    (4.35, 4.35, "reproduced"), (4.35, 3.5, "reproduced"), (4.35, 30.0, "reproduced"),  # within the band, beyond it
    (11.43, 8.0, "partly"), (4.35, 0.5, "partly"),                                    # right sign, far short
    (4.35, 0.0, "not"), (4.35, -2.0, "not"), (4.35, None, "not"), (4.35, float("nan"), "not"),
    (-5.0, -6.0, "reproduced"), (-5.0, -1.0, "partly"), (-5.0, 3.0, "not"),          # a claimed loss
])
def test_at_least(paper: float, measured: float | None, expected: str) -> None:
    assert gain_verdict(paper, measured, "at_least") == expected


@pytest.mark.parametrize(("measured", "expected"), [
    (2.48, "reproduced"), (1.6, "reproduced"), (3.4, "reproduced"),
    (9.0, "partly"), (0.2, "partly"), (-0.5, "not"), (None, "not"),
])
def test_about(measured: float | None, expected: str) -> None:
    assert gain_verdict(2.48, measured, "about") == expected


@pytest.mark.parametrize(("measured", "expected"), [
    (-40.0, "reproduced"), (2.6, "reproduced"), (3.6, "reproduced"), (4.5, "partly"), (4.7, "not"), (None, "not"),
])
def test_at_most(measured: float | None, expected: str) -> None:
    assert gain_verdict(2.6, measured, "at_most") == expected


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="kind"):
        gain_verdict(1.0, 1.0, "roughly")


@pytest.mark.parametrize(("values", "descending", "expected"), [
    ([9.0, 7.0, 4.0, 1.0], True, "reproduced"),
    ([7.0, 9.0, 4.0, 1.0], True, "partly"),      # 5 of 6 pairs
    ([1.0, 4.0, 9.0, 7.0], True, "not"),         # 1 of 6
    ([0.5, 2.0, 4.0], False, "reproduced"),
    ([2.0, 0.5, 4.0], False, "partly"),          # 2 of 3
    ([4.0, 2.0, 0.5], False, "not"),
    ([1.0, 1.0, 1.0], False, "not"),             # ties are out of order
    ([0.5, None, 4.0], False, "not"),            # 1 of 3: a missing value is out of order
])
def test_order(values: list[float | None], descending: bool, expected: str) -> None:
    assert order_verdict(values, descending) == expected


def _summary(gains: dict[str, float], waits: dict[str, float]) -> list[dict[str, Any]]:
    rows = [{"policy": REFERENCE, "seeds": [1000], "e2e_gain_pct": 0.0, "makespan_gain_pct": 0.0,
             "router_wait_s_mean": 0.0}]
    for name, g in gains.items():
        rows.append({"policy": name, "seeds": [1000], "e2e_gain_pct": g, "makespan_gain_pct": g,
                     "router_wait_s_mean": waits.get(name, 0.0), "training_steps": 10})
    return rows


def test_claims_of_the_paper_s_own_numbers_are_all_reproduced() -> None:
    gains = {v.label: v.gain_pct for v in VARIANTS}
    gains.update(jsq=0.46, earliest_available=2.48, max_capacity=2.60, min_min=1.50, least_kv=-3.0)
    rows = claims(_summary(gains, {v.label: v.wait_s for v in VARIANTS}), "crafted")
    assert len(rows) == 10
    assert {r["verdict"] for r in rows} == {"reproduced"}, [(r["claim"], r["verdict"]) for r in rows]
    assert all(tuple(r)[:5] == KEYS for r in rows)


def test_claims_of_a_reversed_result() -> None:
    gains = {"baseline_rl": 12.0, "aware_rl": 5.0, "guided_rl": -3.0, "jsq": 9.0, "earliest_available": 0.3}
    rows = {r["claim"]: r for r in claims(_summary(gains, {"baseline_rl": 3.0, "aware_rl": 2.0, "guided_rl": 1.0}),
                                          "crafted")}
    verdict = {k.split(":")[0] + (" T" if "time to finish" in k else ""): r["verdict"] for k, r in rows.items()}
    assert verdict["Baseline RL"] == "reproduced" and verdict["Workload-Aware RL"] == "partly"
    assert verdict["Workload-Guided RL"] == "not" and verdict["Workload-Guided RL T"] == "not"
    assert verdict["best paper heuristic"] == "not"          # 9 % > 2.6 % + 2 tol
    assert verdict["earliest-available"] == "partly"
    assert verdict["router wait"] == "not" and verdict["E2E gain"] == "not"
    assert rows["router wait: Baseline < Guided < Aware"]["measured"].startswith("Guided 1.00 s < Aware")


# ---------------------------------------------------------------------- end to end (tiny size)
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("reproduce")
    p = _cli(["spec001", "--quick", "--json", "--no-progress", "--out", str(out)])
    assert p.returncode == 0, p.stderr[-3000:]
    return out, _lines(p.stdout)


def test_json_lines_have_the_required_keys(tiny_run: tuple[Path, list[dict[str, Any]]]) -> None:
    out, rows = tiny_run
    assert len(rows) == 10
    for r in rows:
        assert set(KEYS) <= set(r), r
        assert r["verdict"] in VERDICTS and r["paper"] == "spec001" and r["setting"] == "tiny"
        assert isinstance(r["claim"], str) and r["paper_value"] is not None
    for f in ("claims.json", "claims.md", "evaluation.json", "evaluation.md"):
        assert (out / f).is_file(), f
    for v in VARIANTS:
        assert (out / "train" / f"spec001_{v.key}" / "best" / "checkpoint.json").is_file()
    assert json.loads((out / "claims.json").read_text())["claims"] == rows
    policies = {e["policy"] for e in json.loads((out / "evaluation.json").read_text())["summary"]}
    assert {"round_robin", "earliest_available", *(v.label for v in VARIANTS)} <= policies


def test_from_runs_evaluates_the_same_checkpoints_again(tiny_run: tuple[Path, list[dict[str, Any]]],
                                                        tmp_path: Path) -> None:
    out, rows = tiny_run
    runs = ",".join(str(out / "train" / f"spec001_{v.key}") for v in VARIANTS)
    p = _cli(["spec001", "--json", "--no-progress", "--seeds", "1", "--from-runs", runs, "--out", str(tmp_path)])
    assert p.returncode == 0, p.stderr[-3000:]
    again = _lines(p.stdout)
    assert not (tmp_path / "train").exists()  # nothing trained
    assert [r["measured"] for r in again] == [r["measured"] for r in rows]  # evaluation is deterministic
    assert {r["setting"] for r in again} == {"runs"} and "NOT the full setting" in again[0]["setting_note"]


def test_from_runs_in_the_wrong_order_is_refused(tiny_run: tuple[Path, list[dict[str, Any]]],
                                                  capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out, _ = tiny_run
    runs = ",".join(str(out / "train" / f"spec001_{k}") for k in ("guided", "aware", "baseline"))
    with pytest.raises(SystemExit) as e:
        reproduce.main(["spec001", "--from-runs", runs, "--out", str(tmp_path)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "guidance=guided" in err


# ---------------------------------------------------------------------- errors and dispatch
def test_unknown_spec_is_one_line_exit_2() -> None:
    p = _cli(["spec999", "--quick"], timeout=60)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("llmsim-reproduce: error: unknown spec 'spec999'")
    assert p.stdout == ""


@pytest.mark.parametrize("runs", ["/nonexistent/a,/nonexistent/b,/nonexistent/c", "only_one_dir"])
def test_bad_from_runs_is_one_line_exit_2(runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        reproduce.main(["spec001", "--from-runs", runs, "--out", str(tmp_path / "out")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("llmsim-reproduce: error: --from-runs")


def test_bad_option_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        reproduce.main(["spec001", "--jobs", "0"])
    assert e.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_spec002_is_dispatched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    calls = []

    def run(quick: bool, out_dir: Path, jobs: int, progress: bool) -> list[dict[str, Any]]:
        calls.append((quick, out_dir, jobs, progress))
        return [reproduce.claim_row("spec002", "a claim", 1.0, 1.1, "reproduced", unit="%")]

    monkeypatch.setitem(sys.modules, "experiments.papers.best_effort", types.SimpleNamespace(run=run))
    reproduce.main(["spec002", "--quick", "--json", "--jobs", "2", "--out", str(tmp_path)])
    assert calls == [(True, tmp_path, 2, True)]
    row = json.loads(capsys.readouterr().out)
    assert row["paper"] == "spec002" and row["verdict"] == "reproduced"
    assert (tmp_path / "claims.md").is_file()
    with pytest.raises(SystemExit) as e:  # an option spec002's run does not take
        reproduce.main(["spec002", "--from-runs", "a,b,c", "--out", str(tmp_path)])
    assert e.value.code == 2


def test_missing_spec_module_is_one_line_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "experiments.papers.best_effort", None)  # import raises ModuleNotFoundError
    with pytest.raises(SystemExit) as e:
        reproduce.main(["spec002", "--quick"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "spec002" in err


def test_from_runs_option_forms(tiny_run: tuple[Path, list[dict[str, Any]]]) -> None:
    from experiments.papers.intelligent_router import resolve_runs

    assert reproduce.runs_option("a,b,c") == "a,b,c"
    assert reproduce.runs_option("hard=x/y, soft=z") == {"hard": "x/y", "soft": "z"}
    out, _ = tiny_run
    d = {v.key: str(out / "train" / f"spec001_{v.key}") for v in reversed(VARIANTS)}
    ckpts = resolve_runs(reproduce.runs_option(",".join(f"{k}={p}" for k, p in d.items())), 4, "--from-runs")
    assert ckpts == [out / "train" / f"spec001_{v.key}" / "best" for v in VARIANTS]
