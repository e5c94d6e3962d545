"""``llmsim-router`` as a user runs it: ``--help``, a missing serve extra named, bad input as one line and exit
code 2, serving in front of an emulated backend, and its shutdown."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="the serving extra is not installed: pip install 'llmsim[serve]'")

import httpx  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402

from llmsim.emulator import start_emulator  # noqa: E402
from llmsim.serving.cli import main  # noqa: E402
from llmsim.serving.config import parse_config  # noqa: E402
from llmsim.serving.runner import router_server  # noqa: E402
from tests.serving.helpers import SPEEDUP, router_cfg, samples  # noqa: E402

pytestmark = pytest.mark.timeout(120)

# runs the CLI with the serve extra's packages made unimportable, as in an install without it
WITHOUT_SERVE_EXTRA = ("import sys; sys.modules.update(dict.fromkeys(['fastapi', 'uvicorn', 'httpx', "
                       "'prometheus_client'])); from llmsim.serving.cli import main; sys.exit(main())")


def run_cli(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmsim.serving.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_cli_bad_input_is_one_line(tmp_path) -> None:
    bad = tmp_path / "r.yaml"
    bad.write_text("backends: [{name: a, url: 'ftp://x'}]\npolicy: {heuristic: jsq}\n")
    for cfg, needle in ((tmp_path / "none.yaml", "no such router config"), (bad, "backends[0].url")):
        p = run_cli(["--config", str(cfg)])
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr
    unknown = tmp_path / "u.yaml"
    unknown.write_text("backends: [{name: a, url: 'http://127.0.0.1:9'}]\npolicy: {heuristic: nope}\n")
    p = run_cli(["--config", str(unknown)])
    assert p.returncode == 2 and "unknown routing policy 'nope'" in p.stderr and "Traceback" not in p.stderr


def test_cli_serves_in_front_of_an_emulator(tmp_path) -> None:
    h = start_emulator("llama-3.1-8b", "a100-80gb", speedup=SPEEDUP)
    cfg = tmp_path / "router.yaml"
    cfg.write_text(f"backends:\n  - {{name: gpu0, url: '{h.url}'}}\npolicy: {{heuristic: least_work_left}}\n")
    proc = subprocess.Popen([sys.executable, "-m", "llmsim.serving.cli", "--config", str(cfg), "--port", "0"],
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert "llmsim-router: 1 backends" in line, line
        url = line.split(" on ")[1].split(";")[0].strip()
        r = httpx.post(url + "/v1/completions", json={"model": "llmsim-router", "prompt": "hi", "max_tokens": 4},
                       timeout=30)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        h.stop()


@pytest.mark.timeout(60)
def test_the_cli_says_once_which_backend_qlm_cannot_price(tmp_path) -> None:
    """The CLI starts a gateway to check the config (preflight), then the serving one: each said every unpriced
    backend, so the one warning line per backend came twice."""
    cfg = tmp_path / "router.yaml"
    cfg.write_text("backends: [{name: b0, url: 'http://127.0.0.1:9', model: my-finetune, gpu: a100-80gb}]\n"
                   "policy: {heuristic: qlm}\n")
    proc = subprocess.Popen([sys.executable, "-m", "llmsim.serving.cli", "--config", str(cfg), "--port", "0"],
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stderr.readline() for _ in range(2)]  # the announce line and the serving gateway's warning
        assert "llmsim-router: 1 backends" in lines[0] and "backend b0 (model 'my-finetune'): policy qlm cannot " \
            "price it" in lines[1], lines
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=20)[1]
    assert "cannot price" not in rest, rest


@pytest.mark.timeout(60)
def test_the_cli_says_once_that_a_backend_refuses_its_credentials(tmp_path) -> None:
    """The preflight's gateway and the serving one each logged a backend's 401: one line per event, said once."""
    h = start_emulator("llama-3.1-8b", "a100-80gb", speedup=SPEEDUP, api_key="emulator-key")
    cfg = tmp_path / "router.yaml"
    cfg.write_text(f"backends: [{{name: b0, url: '{h.url}'}}]\npolicy: {{heuristic: jsq}}\n")
    proc = subprocess.Popen([sys.executable, "-m", "llmsim.serving.cli", "--config", str(cfg), "--port", "0"],
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stderr.readline() for _ in range(2)]  # the announce line and the serving gateway's warning
        assert "llmsim-router: 1 backends" in lines[0] and "backend b0 " in lines[1] and "answered 401" in lines[1]
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=20)[1]
        h.stop()
    assert "answered 401" not in rest, rest


@pytest.mark.timeout(30)
def test_routebalance_without_static_tpot_exits_with_one_line(tmp_path) -> None:
    """The CLI: one line on stderr naming the key, exit code 2, no traceback."""
    cfg = tmp_path / "router.yaml"
    cfg.write_text("backends: [{name: b0, url: 'http://127.0.0.1:9', model: m}]\n"
                   "policy: {heuristic: routebalance, kwargs: {static_tpot_ms: {m: .nan}}}\n")
    p = subprocess.run([sys.executable, "-m", "llmsim.serving.cli", "--config", str(cfg)], capture_output=True,
                       text=True, timeout=25)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert "policy.kwargs.static_tpot_ms.m: expected a finite number of ms per token > 0" in lines[0]


def test_help_works_and_names_the_extra() -> None:
    p = run_cli(["--help"])
    assert p.returncode == 0 and "--config" in p.stdout and "llmsim[serve]" in p.stdout, p.stdout + p.stderr


def test_a_missing_serve_extra_is_named(tmp_path) -> None:
    """Without fastapi / uvicorn / httpx / prometheus_client: ``--help`` still works, and serving says what to
    install in one line (exit code 2)."""
    cfg = tmp_path / "router.yaml"
    cfg.write_text("backends: [{name: a, url: 'http://127.0.0.1:9'}]\npolicy: {heuristic: jsq}\n")
    helped = subprocess.run([sys.executable, "-c", WITHOUT_SERVE_EXTRA, "--help"], capture_output=True, text=True,
                            timeout=60)
    assert helped.returncode == 0 and "--config" in helped.stdout, helped.stderr
    p = subprocess.run([sys.executable, "-c", WITHOUT_SERVE_EXTRA, "--config", str(cfg)], capture_output=True,
                       text=True, timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "is missing" in lines[0] and "pip install 'llmsim[serve]'" in lines[0], lines[0]


@pytest.mark.parametrize("yaml_text,flags,needle", [
    ("backends: [{name: a, url: 'http://[::1'}]\npolicy: {heuristic: jsq}\n", [],
     "backends[0].url: expected an http:// or https:// URL with its IPv6 host in closed [brackets]"),
    ("backends: [{name: a, url: 'http://127.0.0.1:99999'}]\npolicy: {heuristic: jsq}\n", [],
     "backends[0].url: expected an http:// or https:// URL with a port in 1-65535"),
    ("backends: [{name: a, url: 'http://127.0.0.1:9'}]\npolicy: {heuristic: jsq}\n", ["--port", "70000"],
     "argument --port: expected a TCP port 0-65535 (0: any free one), got '70000'"),
    ("backends: [{name: a, url: 'http://127.0.0.1:9'}]\npolicy: {heuristic: jsq}\n", ["--host", "local host"],
     "--host: expected an address to listen on"),
    ("backends: [{name: a, url: 'http://127.0.0.1:9', api_key: ''}]\npolicy: {heuristic: jsq}\n", [],
     "backends[0].api_key: expected a non-empty key"),
])
def test_bad_options_and_config_keys_are_one_line(tmp_path, yaml_text, flags, needle) -> None:
    cfg = tmp_path / "router.yaml"
    cfg.write_text(yaml_text)
    p = run_cli(["--config", str(cfg), *flags])
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr


def test_a_config_file_that_is_not_utf8_is_named(tmp_path) -> None:
    cfg = tmp_path / "router.yaml"
    cfg.write_bytes(b"backends: [{name: caf\xe9, url: 'http://127.0.0.1:9'}]\npolicy: {heuristic: jsq}\n")
    p = run_cli(["--config", str(cfg)])
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert f"{cfg}: expected a UTF-8 text file, got byte 0xe9" in lines[0], lines[0]


@pytest.mark.parametrize("flags,needle", [(["--port", "70000"], "argument --port: expected an integer 0-65535"),
                                          (["--port", "-1"], "argument --port: expected an integer 0-65535"),
                                          (["--host", ""], "argument --host: expected an address to listen on")])
def test_the_emulator_port_and_host_are_checked(flags, needle) -> None:
    p = subprocess.run([sys.executable, "-m", "llmsim.emulator.cli", "--model", "llama-3.1-8b", "--gpu", "a100-80gb",
                        *flags], capture_output=True, text=True, timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr


@pytest.mark.parametrize("policy,needle", [
    ("{heuristic: nope}", "policy.heuristic: unknown routing policy 'nope'"),
    ("{heuristic: jsq, kwargs: {bogus: 1}}", "policy.kwargs: routing policy 'jsq' got unknown option(s) ['bogus']"),
    ("{onnx: 'zoo:nope'}", "policy.onnx: zoo:nope: no such router in the zoo"),
    ("{onnx: model.pkl}", "policy.onnx: model.pkl: not a policy export")])
def test_a_policy_refused_at_start_names_the_file_and_key(tmp_path, monkeypatch, capsys, policy, needle) -> None:
    """The policy is built after the file is read: its refusal still names the file and the router's own key."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.pkl").write_bytes(b"\x80\x04K\x01.")  # a pickle, never loaded
    (tmp_path / "r.yaml").write_text("backends: [{name: a, url: 'http://127.0.0.1:9', model: llama-2-7b}]\n"
                                     f"policy: {policy}\n")
    assert main(["--config", "r.yaml", "--port", "0"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"llmsim-router: r.yaml: {needle}"), lines


def test_an_address_that_cannot_be_listened_on_names_host_and_port(tmp_path, capsys) -> None:
    cfg = tmp_path / "r.yaml"
    cfg.write_text("backends: [{name: a, url: 'http://127.0.0.1:9'}]\npolicy: {heuristic: jsq}\nhost: 999.1.1.1\n")
    assert main(["--config", str(cfg), "--port", "0"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"{cfg}: host, port: cannot listen on 999.1.1.1:0" in lines[0], lines


class Records(logging.Handler):
    """Every log record of the loggers it is attached to."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_shutdown_cuts_a_client_that_stopped_reading_in_one_log_line() -> None:
    """Ctrl-C / SIGTERM while a client reads nothing of its relayed stream (the router's writes to it paused): once
    the grace period is over its connection is cut and one line says so, the upstream request cancelled as for a
    client that left (uvicorn cancelled the response task instead, logging an error, then a traceback). The grace
    is short here (0.2 s); nothing is timed: a hang is bounded by the join and pytest-timeout."""
    h = start_emulator("llama-3.1-8b", "a100-80gb", speedup=1000.0)
    server, sock = router_server(parse_config(router_cfg([h.url], {"heuristic": "jsq"})), grace_s=0.2)
    gateway = server.config.app.state.gateway
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # (accepted connections inherit it: paused sooner)
    seen = Records()
    loggers = [logging.getLogger(name) for name in ("uvicorn", "llmsim")]
    for lg in loggers:
        lg.addHandler(seen)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        thread.start()
        while not server.started:
            assert thread.is_alive(), "the router did not start"
            time.sleep(0.01)
        client.connect(sock.getsockname())
        body = json.dumps({"model": "llmsim-router", "prompt": "x", "max_tokens": 100000, "stream": True}).encode()
        client.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
                       b"content-length: %d\r\n\r\n%s" % (len(body), body))
        while not any(c.flow is not None and c.flow.write_paused for c in list(server.server_state.connections)):
            assert thread.is_alive(), "the router stopped"
            time.sleep(0.01)  # until the stream's writes wait for the client (who reads nothing)
        server.should_exit = True  # what Ctrl-C and SIGTERM do
        thread.join(30)
        assert not thread.is_alive(), "the router hung on a client that reads nothing"
    finally:
        for lg in loggers:
            lg.removeHandler(seen)
        client.close()
        sock.close()
        h.stop()
    said = [r for r in seen.records if r.levelno >= logging.WARNING]
    assert not [r for r in seen.records if r.exc_info], [r.getMessage() for r in said]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert said[0].getMessage().startswith("shutdown: cut 1 connection still open after the 0.2 s grace"), \
        said[0].getMessage()
    aborted = samples(generate_latest(gateway.metrics.registry).decode(), "llmsim_router_aborted_total")
    assert aborted == {(("reason", "client_gone"),): 1.0}, aborted
