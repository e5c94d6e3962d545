"""The engine's compiled build (llmsim/compiled.py, llmsim/compile.py): used only while it matches the sources, a
stale one refused with one warning, and compiled runs byte-identical to the Python engine's on every engine feature
(fast path and stepping, chunked prefill, swaps, a sliding-window cache, prefix caching, model swaps, P/D hand-off)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from llmsim import compiled
from llmsim.compile import main as compile_main

REPO = Path(__file__).resolve().parents[2]
FILES = ("requests.csv", "dropped.csv", "instances.csv", "timeline.csv", "summary.json")
CASES = {
    "fast_path": ["workload.num_requests=400"],
    "stress": ["cluster=hetero", "engine=chunked", "workload=gamma_bursty", "workload.num_requests=300",
               "policy=power_of_two", "sim.on_unservable=drop", "engine.preemption=swap", "engine.num_gpu_blocks=200",
               "seed=11"],
    "window": ["cluster=single_a100", "cluster.instances.0.model=mistral-7b", "engine.num_gpu_blocks=900",
               "workload.num_requests=200"],
    "prefix": ["workload=shared_prefix", "workload.num_requests=300"],
    "models": ["cluster=multi_model_a100x4", "workload=multi_model", "workload.num_requests=200"],
    "pd": ["cluster=opt13b_pd2x2", "workload.num_requests=200", "sim.on_unservable=drop"],
}
# a process that runs the CLI on the build in argv[1]: this module's file is loaded on its own and activated before
# llmsim is imported (no environment variable or flag of llmsim's own chooses a build)
LAUNCH = """import importlib.util, runpy, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("llmsim_compiled_file", sys.argv[1])
loader = importlib.util.module_from_spec(spec); spec.loader.exec_module(loader)
assert loader.activate(Path(sys.argv[2])), "the build was not used"
import llmsim.engine.instance as inst
assert Path(inst.__file__).is_relative_to(sys.argv[2]), inst.__file__
if sys.argv[3] == "--script":
    exec(sys.argv[4])
else:
    sys.argv = ["llmsim", *sys.argv[3:]]
    runpy.run_module("llmsim", run_name="__main__")
"""
# the Python API with numpy lengths (a workload built with numpy): the compiled engine's counts are Python ints
NUMPY_LENGTHS = """import json
import numpy as np
from llmsim import InstanceConfig, Request, simulate
rng = np.random.default_rng(3)
reqs = [Request(k, float(t), np.int64(p), np.int32(o)) for k, (t, p, o) in
        enumerate(zip(np.cumsum(rng.exponential(0.2, 300)), rng.integers(1, 3000, 300), rng.integers(1, 800, 300)))]
res = simulate([InstanceConfig("llama-2-7b", "a100-80gb")] * 2, reqs, "jsq")
print(json.dumps(res.summary, sort_keys=True, default=str), res.requests.to_csv())
"""

# every env id, two short episodes each under a random mask-respecting policy: the compiled cluster view, driver and
# state classes give the envs the same observations, rewards and infos (one hash per id)
ENV_TRAJECTORIES = """import hashlib
import gymnasium as gym
import numpy as np
import llmsim.envs as envs
for env_id in envs.ENV_IDS:
    env = gym.make(env_id).unwrapped
    rng, h, steps = np.random.default_rng(5), hashlib.sha256(), 0
    obs, info = env.reset(seed=5)
    for _ in range(1200):
        valid = np.flatnonzero(env.action_masks())
        obs, r, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        flat = obs.values() if isinstance(obs, dict) else [obs]
        h.update(b"".join(np.asarray(o).tobytes() for o in flat) + float(r).hex().encode() + repr(info).encode())
        steps += 1
        if term or trunc:
            obs, info = env.reset()
    print(env_id, steps, h.hexdigest())
"""


def _fake_build(tmp_path: Path, **changes) -> Path:
    """A manifest as ``build`` writes it, with empty stand-ins for the compiled files (never imported here)."""
    build = tmp_path / "build"
    files = {m: m + compiled.build_platform()["ext_suffix"] for m in compiled.MODULES}
    build.mkdir(parents=True)
    for f in files.values():
        (build / f).write_bytes(b"")
    manifest = {"modules": list(compiled.MODULES), "files": files, "sources": compiled.source_digest(),
                "platform": compiled.build_platform(), "mypy": "test", **changes}
    (build / compiled.MANIFEST).write_text(json.dumps(manifest))
    return build


def test_a_build_is_usable_only_while_it_matches_the_sources_and_the_python(tmp_path):
    assert compiled.stale_reason(_fake_build(tmp_path)) is None
    assert compiled.stale_reason(tmp_path / "none") == "no build"
    assert "sources changed" in compiled.stale_reason(_fake_build(tmp_path / "a", sources="0" * 64))
    assert "another Python" in compiled.stale_reason(_fake_build(tmp_path / "b", platform={"python": "2.7"}))
    assert "list of modules" in compiled.stale_reason(_fake_build(tmp_path / "c", modules=["llmsim.engine.kv"]))
    gone = _fake_build(tmp_path / "d")
    (gone / ("llmsim.engine.instance" + compiled.build_platform()["ext_suffix"])).unlink()
    assert compiled.stale_reason(gone) == "missing compiled files of llmsim.engine.instance"
    elsewhere = _fake_build(tmp_path / "e")
    manifest = json.loads((elsewhere / compiled.MANIFEST).read_text())
    manifest["files"]["llmsim.engine.instance"] = "../../elsewhere.so"  # a manifest never points out of its build
    (elsewhere / compiled.MANIFEST).write_text(json.dumps(manifest))
    assert compiled.stale_reason(elsewhere) == "its files are not the ones a build writes"


def test_the_digest_covers_every_source_of_the_package_and_nothing_else():
    names = {p.relative_to(compiled.PACKAGE_DIR).as_posix() for p in compiled.package_sources(compiled.PACKAGE_DIR)}
    assert {"engine/instance.py", "engine/kv.py", "request.py", "compiled.py", "cluster/cluster.py"} <= names
    assert not any(n.split("/")[0] in {"agents", "envs", "serving", "_compiled"} for n in names)


def test_a_stale_build_gives_one_warning_and_the_python_engine(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if type(f).__name__ != "_CompiledFinder"])
    stale = _fake_build(tmp_path, sources="0" * 64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert compiled.activate(stale) is False
    assert len(caught) == 1 and "python -m llmsim.compile build" in str(caught[0].message)
    assert "sources changed" in str(caught[0].message) and compiled.in_use() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compiled.activate(tmp_path / "nothing") is False  # no build: silent
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-m", "llmsim.compile", "build"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compiled.activate(stale) is False  # the rebuild command reports the state itself: no warning


def test_a_manifest_that_is_not_json_is_one_line(tmp_path, capsys):
    (tmp_path / compiled.MANIFEST).write_text("{not json")
    assert compile_main(["status", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "manifest.json: not a readable build manifest" in err


def _run(tmp_path: Path, name: str, args: list[str], build: Path | None) -> Path:
    out = tmp_path / name
    tail = [*args, "output.plots=false", f"hydra.run.dir={out}"]
    cmd = ([sys.executable, "-c", LAUNCH, str(REPO / "llmsim/compiled.py"), str(build), *tail] if build
           else [sys.executable, "-m", "llmsim", *tail])
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240,
                       env={**os.environ, "PYTHONWARNINGS": "error::RuntimeWarning:llmsim.compiled"})
    assert p.returncode == 0, p.stderr[-3000:]
    return out


@pytest.mark.timeout(1500)
@pytest.mark.skipif(importlib.util.find_spec("mypyc") is None,
                    reason='mypyc is not installed (pip install -e ".[compiled]")')
@pytest.mark.skipif(compiled.in_use() is not None, reason="a compiled build is in use in this checkout, so the plain "
                    "runs would be compiled too (python -m llmsim.compile clean, then run this test)")
def test_compiled_runs_are_byte_identical_to_the_python_engine(tmp_path):
    build = tmp_path / "build"
    assert compile_main(["build", "--out", str(build)]) == 0
    assert compiled.stale_reason(build) is None
    for case, args in CASES.items():
        python = _run(tmp_path, f"{case}_py", args, None)
        native = _run(tmp_path, f"{case}_c", args, build)
        for f in FILES:
            assert (python / f).read_bytes() == (native / f).read_bytes(), (case, f)
        assert len((python / "requests.csv").read_text().splitlines()) > 100, case  # real work was compared
    script = [[sys.executable, "-c", NUMPY_LENGTHS],
              [sys.executable, "-c", LAUNCH, str(REPO / "llmsim/compiled.py"), str(build), "--script", NUMPY_LENGTHS]]
    python, native = (subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240, check=True).stdout
                      for cmd in script)
    assert python == native and '"completed": 300' in python
    envs = [[sys.executable, "-c", ENV_TRAJECTORIES],
            [sys.executable, "-c", LAUNCH, str(REPO / "llmsim/compiled.py"), str(build), "--script", ENV_TRAJECTORIES]]
    python, native = (subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=True).stdout
                      for cmd in envs)
    assert python == native and python.count(" 1200 ") >= 4, python
