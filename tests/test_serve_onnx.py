"""Exported policies behind the live router: the same artefact that routes in the simulator routes emulated
backends (flat DDQN and SAC + HAN), and an export for other backends is refused before serving."""

from __future__ import annotations

import asyncio
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serving extra is not installed: pip install 'llmsim[serve]'")
pytest.importorskip("torch", reason="building an export needs the rl extra")

import httpx  # noqa: E402

from llmsim.agents.export import export  # noqa: E402
from llmsim.agents.imitate import EXPERTS, demo_checkpoint  # noqa: E402
from llmsim.emulator import start_emulator  # noqa: E402
from llmsim.serving.runner import start_router  # noqa: E402
from tests.test_serve_router import burst, router_cfg, samples  # noqa: E402

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("exports")
    return {k: export(demo_checkpoint(k, root), check_steps=0) for k in ("ddqn_flat", "sac_han")}


@pytest.mark.parametrize("kind,models", [("ddqn_flat", ["llama-2-7b"] * 4), ("sac_han", EXPERTS)])
def test_an_exported_policy_routes_live_traffic(exports, kind, models) -> None:
    hs = [start_emulator("llama-3.1-8b", "a100-80gb", speedup=50.0, max_num_seqs=16, seed=i)
          for i in range(len(models))]
    try:
        cfg = router_cfg([h.url for h in hs], {"onnx": str(exports[kind])})
        for b, m in zip(cfg["backends"], models):  # the llmsim names the policy was trained on
            b.update(policy_model=m, max_num_seqs=16)
        with start_router(cfg) as r:
            results = asyncio.run(burst(r.url, 60, gap=0.003))
            served = [x for x in results if x["status"] == 200]
            assert all(x["error"] is None and x["tokens"] == x["asked"] for x in served)
            # spec 000's router may drop (its action space has drop): a clear 503, never a lost request
            dropped = [x for x in results if x["status"] != 200]
            assert all(x["status"] == 503 and "drop" in x["error"]["message"] for x in dropped), dropped[:2]
            assert len(served) >= 30 and (kind == "sac_han" or not dropped)
            text = httpx.get(r.url + "/metrics").text
            split = samples(text, "llmsim_router_decisions_total")
            assert sum(split.values()) == len(served) and sum(v > 0 for v in split.values()) >= 2, split  # JSQ clone
            assert sum(samples(text, "llmsim_router_decision_latency_seconds_count").values()) == 60
            assert sum(samples(text, "llmsim_router_requests_total").values()) == 60
            assert samples(text, "llmsim_router_policy_fallbacks_total")[()] == 0
    finally:
        for h in hs:
            h.stop()


def test_an_export_for_other_backends_is_refused_naming_both(exports, tmp_path) -> None:
    hs = [start_emulator("llama-3.1-8b", "a100-80gb", speedup=50.0) for _ in range(2)]
    try:
        cfg = tmp_path / "router.yaml"
        cfg.write_text("backends:\n" + "".join(f"  - {{name: g{i}, url: '{h.url}', policy_model: llama-2-7b}}\n"
                                               for i, h in enumerate(hs))
                       + f"policy: {{onnx: '{exports['ddqn_flat']}'}}\n")
        p = subprocess.run([sys.executable, "-m", "llmsim.serving.cli", "--config", str(cfg), "--port", "0"],
                           capture_output=True, text=True, timeout=120)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1, p.stderr
        assert "4 instances" in lines[0] and "2 instances" in lines[0], lines[0]
    finally:
        for h in hs:
            h.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _readme_serving() -> tuple[str, str, str, str]:
    """The README's three serving commands and its router.yaml block."""
    text = (ROOT / "README.md").read_text()
    sec = text[text.index("## Serving trained routers"):]
    bash = re.search(r"```bash\n(.*?)```", sec, re.S).group(1)
    lines = [re.split(r"\s{2,}#", ln)[0].strip() for ln in bash.strip().splitlines()]
    return lines[0], lines[1], lines[2], re.search(r"```yaml\n(.*?)```", sec, re.S).group(1)


def test_the_readme_serving_flow_runs(tmp_path) -> None:
    """README, "Serving trained routers": export, four emulators (the for-loop's arguments, on free ports and 20x
    faster), the router on the README's router.yaml, one request through it."""
    export_cmd, emulate_loop, router_cmd, yaml_block = _readme_serving()
    ckpt = demo_checkpoint("ddqn_flat", tmp_path / "train")  # stands in for the README's trained run
    args = shlex.split(export_cmd.replace("outputs/train/<date>/<time>/best", str(ckpt)))
    assert args[0] == "llmsim-export"
    p = subprocess.run([sys.executable, "-m", "llmsim.agents.export", *args[1:], f"hydra.run.dir={tmp_path}/h"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    loop = re.match(r"for p in ([\d ]+); do (llmsim-emulate .*?) --port \$p & done", emulate_loop)
    assert loop, emulate_loop
    readme_ports = loop.group(1).split()
    ports = {old: str(_free_port()) for old in readme_ports}
    procs = [subprocess.Popen([sys.executable, "-m", "llmsim.emulator.cli", *shlex.split(loop.group(2))[1:],
                               "--port", ports[old], "--speedup", "20"], stderr=subprocess.PIPE, text=True)
             for old in readme_ports]
    try:
        for pr in procs:
            assert "llmsim-emulate:" in pr.stderr.readline()
        cfg = yaml_block
        for old, new in ports.items():
            cfg = cfg.replace(f":{old}", f":{new}")
        (tmp_path / "router.yaml").write_text(cfg)
        rport = str(_free_port())
        argv = shlex.split(router_cmd.replace("--port 8000", f"--port {rport}"))
        assert argv[0] == "llmsim-router"
        router = subprocess.Popen([sys.executable, "-m", "llmsim.serving.cli", *argv[1:]], cwd=tmp_path,
                                  stderr=subprocess.PIPE, text=True)
        procs.append(router)
        line = router.stderr.readline()
        assert "4 backends, policy exports/ddqn" in line, line
        r = httpx.post(f"http://127.0.0.1:{rport}/v1/completions", timeout=30,
                       json={"model": "llmsim-router", "prompt": "Hello", "max_tokens": 5})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5, r.text
    finally:
        for pr in procs:
            pr.terminate()
        for pr in procs:
            pr.wait(timeout=20)
