"""docs/serving.md's "From a trained checkpoint to live traffic", run as a newcomer would paste it: train (with a
short budget), export the checkpoint at the path the docs give, four emulators (on free ports, 20x faster), the
router on the docs' router.yaml, and the docs' curl request through it."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys

import pytest

pytest.importorskip("fastapi", reason="the serving extra is not installed: pip install 'llmsim[serve]'")
pytest.importorskip("torch", reason="training and exporting need the rl extra")

import httpx  # noqa: E402

from tests.helpers import REPO  # noqa: E402

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
SECTION = "## From a trained checkpoint to live traffic"
SHORT_TRAINING = ["trainer.total_steps=3000", "trainer.eval_every=0", "trainer.progress=false"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def docs_flow() -> tuple[dict[str, str], str, str, str]:
    """The section's commands by program (``for`` for the emulators' loop), its router.yaml, the curl URL and body."""
    text = (REPO / "docs" / "serving.md").read_text()
    sec = text[text.index(SECTION):]
    sec = sec[:sec.index("\n## ", 1)]
    bash = re.search(r"```bash\n(.*?)```", sec, re.S).group(1)
    lines = [re.split(r"\s{2,}#", ln)[0].strip() for ln in bash.strip().splitlines()]
    commands = {ln.split()[0]: ln for ln in lines}
    assert list(commands) == ["llmsim-train", "llmsim-export", "for", "llmsim-router"], lines
    curl = re.search(r"curl (\S+) -d '(\{.*?\})'", sec)
    return commands, re.search(r"```yaml\n(.*?)```", sec, re.S).group(1), curl.group(1), curl.group(2)


def run(args: list[str], cwd, timeout: float = 240) -> None:
    p = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-2000:]


def test_the_serving_docs_flow_runs(tmp_path) -> None:
    commands, router_yaml, curl_url, curl_body = docs_flow()
    train = shlex.split(commands["llmsim-train"])
    run(["-m", "llmsim.agents.train", *train[1:], *SHORT_TRAINING], tmp_path)
    best = sorted(tmp_path.glob("outputs/train/*/*/best"))  # where the export command says a run's best/ is
    assert len(best) == 1, list(tmp_path.rglob("best"))
    run_dir = best[0].parent.relative_to(tmp_path / "outputs" / "train")
    export = shlex.split(commands["llmsim-export"].replace("<date>/<time>", str(run_dir)))
    run(["-m", "llmsim.agents.export", *export[1:]], tmp_path)
    loop = re.match(r"for p in ([\d ]+); do (llmsim-emulate .*?) --port \$p & done", commands["for"])
    assert loop, commands["for"]
    ports = {old: str(free_port()) for old in loop.group(1).split()}
    procs = [subprocess.Popen([sys.executable, "-m", "llmsim.emulator.cli", *shlex.split(loop.group(2))[1:],
                               "--port", new, "--speedup", "20"], stderr=subprocess.PIPE, text=True)
             for new in ports.values()]
    try:
        for pr in procs:
            assert "llmsim-emulate:" in pr.stderr.readline()
        cfg = router_yaml
        for old, new in ports.items():
            cfg = cfg.replace(f":{old}", f":{new}")
        (tmp_path / "router.yaml").write_text(cfg)
        docs_port = re.search(r"--port (\d+)", commands["llmsim-router"]).group(1)
        port = str(free_port())
        argv = shlex.split(commands["llmsim-router"].replace(f"--port {docs_port}", f"--port {port}"))
        router = subprocess.Popen([sys.executable, "-m", "llmsim.serving.cli", *argv[1:]], cwd=tmp_path,
                                  stderr=subprocess.PIPE, text=True)
        procs.append(router)
        line = router.stderr.readline()
        assert f"{len(ports)} backends, policy exports/ddqn" in line, line
        url = "http://" + curl_url.replace(f"localhost:{docs_port}", f"127.0.0.1:{port}")
        r = httpx.post(url, content=curl_body, timeout=30)
        asked = json.loads(curl_body)["max_tokens"]
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == asked, r.text
    finally:
        for pr in procs:
            pr.terminate()
        for pr in procs:
            pr.wait(timeout=20)
