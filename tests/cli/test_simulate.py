"""The Hydra CLI runs, prints the vllm-bench style summary, saves outputs, and sweeps."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO


def run_cli(args, cwd):
    return subprocess.run([sys.executable, "-m", "llmsim", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_default_run_prints_summary_and_saves(tmp_path):
    p = run_cli(["workload.num_requests=200", f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert "Mean TTFT (ms)" in p.stdout and "Successful requests" in p.stdout
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["completed"] == 200
    for f in ("requests.csv", "timeline.csv", "instances.csv", "latency_cdf.png", "timeline.png"):
        assert (run / f).exists(), f


@pytest.mark.parametrize("override,names", [
    ("+cluster.instances.0.gpus=a100", ["cluster.instances[0]", "'gpus'", "'gpu'"]),  # and the likely key
    ("+sim.bogus=1", ["sim", "'bogus'", "metrics_interval"]),
])
def test_bad_key_gives_one_clear_line_naming_it(tmp_path, override, names):
    p = run_cli([override, "output.plots=false", f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("llmsim: error: "), p.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert not (tmp_path / "run" / "summary.json").exists()


def test_multirun_sweep_and_report(tmp_path):
    p = run_cli(["-m", "workload.rate=2,6", "workload.num_requests=100", "output.plots=false",
                 f"hydra.sweep.dir={tmp_path}/sweep"], tmp_path)
    assert p.returncode == 0, p.stderr
    jobs = sorted((tmp_path / "sweep").glob("*/summary.json"))
    assert len(jobs) == 2
    r = subprocess.run([sys.executable, "-m", "llmsim.cli.report", str(tmp_path / "sweep")], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "sweep" / "sweep.csv").exists()


def test_trace_replay_from_another_directory(tmp_path, shared_dir):
    p = run_cli(["workload=azure_conv", "workload.max_requests=300", "sim.on_unservable=drop",
                 "output.plots=false", f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert p.returncode == 0, p.stderr
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["completed"] + s["dropped"] == 300


# ---------------------------------------------------------------------- --help
SIM_GROUPS = ("cluster", "engine", "workload", "policy")


def _help(module_or_script: list[str], tmp_path) -> str:
    p = subprocess.run([*module_or_script, "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("entry", ["module", "script"])
def test_help_names_the_app_and_lists_only_the_simulation_groups(tmp_path, entry):
    from llmsim.resources import conf_dir

    script = Path(sys.executable).parent / "llmsim"
    if entry == "script" and not script.exists():
        pytest.skip("console script not installed")
    out = _help([sys.executable, "-m", "llmsim"] if entry == "module" else [str(script)], tmp_path)
    assert out.startswith("llmsim: ")
    for wrong in ("cli.py", "__main__", "cli is powered", "powered by Hydra", "hydra/launcher", "$APP_CONFIG",
                  "llmsim_presets"):
        assert wrong not in out, wrong
    section = out.split("== Config groups (GROUP=OPTION) ==\n", 1)[1].split("\n\n", 1)[0]
    listed: dict[str, list[str]] = {}
    for line in section.splitlines():
        if line.startswith(" "):  # a long list wraps, indented
            listed[list(listed)[-1]] += [o.strip() for o in line.split(",") if o.strip()]
            continue
        group, _, options = line.partition(":")
        listed[group] = [o.strip() for o in options.split(",") if o.strip()]
    assert list(listed) == list(SIM_GROUPS)  # not env, reward, capacity (conf/), not hydra's
    for group, options in listed.items():  # the lists follow conf/ (a new preset must be added to the help)
        assert options == sorted(f.stem for f in (conf_dir() / group).glob("*.yaml")), group


def test_help_examples_are_three_valid_commands(tmp_path):
    from hydra import compose, initialize_config_dir

    from llmsim.resources import conf_dir

    out = _help([sys.executable, "-m", "llmsim"], tmp_path)
    examples = out.split("== Examples ==\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(examples) == 3 and all(e.startswith("  llmsim ") for e in examples)
    assert any(" -m " in e for e in examples)  # one of them is a sweep
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        for example in examples:
            overrides = [a.split(",")[0] for a in example.split()[1:] if a != "-m"]  # a sweep's first point
            cfg = compose(config_name="config", overrides=overrides)
            assert cfg.policy.name and cfg.cluster.instances


def test_job_name_is_llmsim(tmp_path):
    p = run_cli(["workload.num_requests=20", "output.plots=false", f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "run" / "llmsim.log").exists()
    assert (tmp_path / "run" / ".hydra" / "hydra.yaml").read_text().count("name: llmsim") >= 1


@pytest.mark.parametrize("prog,args,needle", [
    ("llmsim", ["lr=nan"], "Could not override 'lr'"),
    ("llmsim", ["policy=no_such_router"], "Could not find 'policy/no_such_router'"),
    ("llmsim-capacity", ["capacity.no_such_key=1"], "capacity.no_such_key"),
    ("llmsim", ["-m", "workload.rate=1,2", "--cfg", "job"], "only one of --run, --multirun, --cfg"),
])
def test_a_bad_override_is_one_line_and_exit_2(prog, args, needle, tmp_path) -> None:
    """Hydra's own errors (unknown keys, missing presets) read like llmsim's: one line, exit status 2."""
    exe = Path(sys.executable).parent / prog
    p = subprocess.run([str(exe), *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: ") and needle in lines[0], p.stderr
    assert not any(tmp_path.iterdir()), "a failed run left files behind"


@pytest.mark.parametrize("text,needle", [
    ("kind: synthetic\nnum_requests: 5\nnum_requests: 6\n",
     "dup.yaml: line 3: key 'num_requests' given twice in one mapping; give each key once"),
    ("kind: synthetic\nnum_requests: [5\n", "dup.yaml: not valid YAML at line 3: expected ',' or ']'"),
])
def test_a_config_file_giving_a_key_twice_or_not_yaml_is_one_line_naming_file_and_line(text, needle, tmp_path):
    """Hydra's YAML loader refuses a key given twice (as llmsim's own loader does), but with a parser traceback."""
    (tmp_path / "cd" / "workload").mkdir(parents=True)
    (tmp_path / "cd" / "workload" / "dup.yaml").write_text(text)
    p = run_cli(["--config-dir", str(tmp_path / "cd"), "workload=dup"], tmp_path)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmsim: error: ") and needle in lines[0], p.stderr
    assert str(tmp_path / "cd" / "workload" / "dup.yaml") in lines[0]
