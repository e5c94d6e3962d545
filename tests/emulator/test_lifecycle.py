"""The emulator's life cycle and command: a client that disconnects aborts its request, stopping with open
streams hangs nothing and lets no new connection in, ``llmsim-emulate`` (bad input as one line, serving, the
serve extra named when missing) and what ``import llmsim`` leaves out. Wall time only bounds hangs, generously."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

import llmsim.emulator
from llmsim import http_server
from llmsim.emulator import EmulatorHandle, EmulatorOptions, create_app, listen_socket, start_emulator
from llmsim.emulator.cli import main as cli_main
from llmsim.http_server import DrainingServer, server_config
from llmsim.serving import runner
from tests.emulator.helpers import MODEL, metrics, sample, scrape, wait_until_idle
from tests.helpers import REPO

# runs llmsim-emulate with the serve extra's packages made unimportable, as in an install without it
WITHOUT_SERVE_EXTRA = ("import sys; sys.modules.update(dict.fromkeys(['fastapi', 'uvicorn', 'httpx', "
                       "'prometheus_client'])); from llmsim.emulator.cli import main; main(sys.argv[1:])")


# ---------------------------------------------------------------------- disconnects and stopping
def test_the_serving_pieces_live_beside_the_emulator_not_in_it() -> None:
    """The emulator and the live router serve with the same uvicorn pieces, from one neutral module (the router
    imported them from inside the emulator); the emulator's names for them stay."""
    assert (llmsim.emulator.ServerThread, listen_socket) == (http_server.ServerThread, http_server.listen_socket)
    assert EmulatorHandle.__mro__[1] is http_server.ServerThread
    assert http_server.log.name == "llmsim.http_server" and runner.DrainingServer is http_server.DrainingServer


def test_client_disconnect_aborts_the_request(emu: EmulatorHandle) -> None:
    before = metrics(emu)
    body = {"model": MODEL, "prompt": "q" * 100, "max_tokens": 20000, "stream": True}
    with httpx.stream("POST", emu.url + "/v1/completions", json=body, timeout=30) as r:
        it = r.iter_lines()
        for _ in range(6):
            next(it)
    m = wait_until_idle(emu)
    ok = "vllm:request_success_total"
    assert sample(m, ok, finished_reason="abort") == sample(before, ok, finished_reason="abort") + 1
    # aborted, not run to its 20,000 tokens (~15 s at 20x): the close is noticed at once (a few tokens here);
    # the bound leaves a loaded machine seconds of slack
    assert sample(m, "vllm:generation_tokens_total") - sample(before, "vllm:generation_tokens_total") < 10_000


def test_stop_with_open_streams_does_not_hang() -> None:
    h = start_emulator(MODEL, "a100-80gb", speedup=20.0)
    got: list[int] = []
    ended: list[str] = []

    def reader() -> None:
        n = 0
        try:
            body = {"model": MODEL, "prompt": "w" * 50, "max_tokens": 50000, "stream": True}
            with httpx.stream("POST", h.url + "/v1/completions", json=body, timeout=10) as r:
                for _ in r.iter_lines():
                    n += 1
            ended.append("eof")
        except httpx.HTTPError as e:
            ended.append(type(e).__name__)
        got.append(n)

    threads = [threading.Thread(target=reader, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    # 20 tokens released to each stream: its first chunks (> 5 lines) have long been written to the client
    while len(h.engine.tickets) < 3 or min(t.available for t in list(h.engine.tickets.values())) < 20:
        time.sleep(0.01)  # a hang is bounded by pytest-timeout
    h.stop()
    assert not h.thread_alive  # stop() returned with the server's thread ended: it waited for no stream
    for t in threads:
        t.join(20)  # a hang bound: a cut connection ends the client's read at once
        assert not t.is_alive(), "a client stream hung after the server stopped"
    assert len(ended) == 3 and min(got) > 5, (ended, got)
    with pytest.raises(httpx.ConnectError):
        httpx.get(h.url + "/health", timeout=2)


def test_a_stopping_server_lets_no_new_connection_in() -> None:
    """Once stop() has begun, the port refuses connections at once (not at uvicorn's next tick): a router's health
    check let in meanwhile was answered by the dying backend and readmitted it. The kill is held inside on_kill,
    on the server's loop, so uvicorn cannot tick meanwhile and the check is deterministic."""
    h = start_emulator(MODEL, "a100-80gb", speedup=20.0)
    in_kill, release = threading.Event(), threading.Event()
    stop_engine = h.on_kill

    def held_kill() -> None:
        stop_engine()
        in_kill.set()
        release.wait(10)

    h.on_kill = held_kill  # type: ignore[method-assign]
    stopper = threading.Thread(target=h.stop, daemon=True)
    stopper.start()
    try:
        assert in_kill.wait(10), "stop() never reached on_kill"
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((h.host, h.port), timeout=2).close()
    finally:
        release.set()
        stopper.join(10)
    assert not stopper.is_alive()


class Records(logging.Handler):
    """Every log record of the loggers it is attached to."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_shutdown_cuts_a_client_that_stopped_reading_in_one_log_line() -> None:
    """Ctrl-C / SIGTERM while a client reads nothing of its stream (the server's writes to it paused): once the
    grace period is over its connection is cut and one line says so, its request counted as aborted (uvicorn
    cancelled the response task instead, logging an error, then a traceback per request). The grace is short here
    (0.2 s); nothing is timed: a hang is bounded by the join and pytest-timeout."""
    app = create_app(EmulatorOptions(model=MODEL, gpu="a100-80gb", speedup=1000.0))
    engine = app.state.engine
    sock = listen_socket("127.0.0.1", 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # (accepted connections inherit it: paused sooner)
    server = DrainingServer(server_config(app, lifespan="on", timeout_graceful_shutdown=0.2), on_shutdown=engine.stop)
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
            time.sleep(0.01)
        client.connect(sock.getsockname())
        body = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 100000, "stream": True}).encode()
        client.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
                       b"content-length: %d\r\n\r\n%s" % (len(body), body))
        while not any(c.flow is not None and c.flow.write_paused for c in list(server.server_state.connections)):
            time.sleep(0.01)  # until the stream's writes wait for the client (who reads nothing)
        server.should_exit = True  # what Ctrl-C and SIGTERM do
        thread.join(30)
        assert not thread.is_alive(), "the server hung on a client that reads nothing"
    finally:
        for lg in loggers:
            lg.removeHandler(seen)
        client.close()
        sock.close()
    said = [r for r in seen.records if r.levelno >= logging.WARNING]
    assert not [r for r in seen.records if r.exc_info], [r.getMessage() for r in said]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert said[0].getMessage().startswith("shutdown: cut 1 connection still open after the 0.2 s grace"), \
        said[0].getMessage()
    assert engine.success["abort"] == 1 and not engine.tickets


# ---------------------------------------------------------------------- the CLI
@pytest.mark.parametrize("args,flag", [
    (["--model", "nope", "--gpu", "a100-80gb"], "--model"),
    (["--model", MODEL, "--gpu", "b200x"], "--gpu"),
    (["--model", MODEL, "--gpu", "a100-80gb", "--speedup", "0"], "--speedup"),
    (["--model", MODEL, "--gpu", "a100-80gb", "--speedup", "fast"], "--speedup"),
    (["--model", MODEL, "--gpu", "a100-80gb", "--engine", "fifo"], "--engine"),
    (["--model", MODEL, "--gpu", "a100-80gb", "--max-model-len", "1000000"], "--max-model-len"),
    (["--model", MODEL, "--gpu", "a100-80gb", "--api-key", "env:EMULATOR_TEST_UNSET_KEY"], "--api-key"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args: list[str], flag: str) -> None:
    p = subprocess.run([sys.executable, "-m", "llmsim.emulator.cli", *args], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("args,words", [
    (["--model", "llama-3.1-70b"], "--model/--gpu/--tp: model 'llama-3.1-70b' does not fit on 1 x a100-80gb: weights "
     "need 141.1 GB per GPU plus 1.5 GB reserved, but --gpu-memory-utilization 0.9 x 85.9 GB"),
    (["--model", MODEL, "--gpu-memory-utilization", "0.1"], "but --gpu-memory-utilization 0.1 x 85.9 GB"),
    (["--model", MODEL, "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization: expected a value <= 1"),
    (["--model", MODEL, "--tp", "2", "--enable-expert-parallel"], "--enable-expert-parallel: model 'llama-3.1-8b' "
     "is dense"),
])
def test_cli_engine_build_errors_name_the_flags(args: list[str], words: str, capsys: pytest.CaptureFixture) -> None:
    """Errors of the engine's builders name the command's flags (a GPU share the command could not set, or a
    message naming no flag, before)."""
    with pytest.raises(SystemExit) as e:
        cli_main([*args, "--gpu", "a100-80gb", "--port", "0"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("llmsim-emulate: error: ") and words in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_cli_an_unmodellable_config_is_named_as_the_model_flag(tmp_path) -> None:
    """The config's own message stays whole (``unknown model_type``), behind the flag it came from."""
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "falcon", "hidden_size": 64}')
    p = subprocess.run([sys.executable, "-m", "llmsim.emulator.cli", "--model", str(cfg), "--gpu", "h100"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith(f"llmsim-emulate: error: --model: HF config {cfg}: unknown model_type 'falcon'")
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_cli_serves() -> None:
    """With its key read from the environment (``--api-key env:NAME``: the key stays out of the process list)."""
    p = subprocess.Popen([sys.executable, "-m", "llmsim.emulator.cli", "--model", MODEL, "--gpu", "a100-80gb",
                          "--port", "0", "--speedup", "50", "--api-key", "env:EMULATOR_TEST_KEY"], cwd=REPO,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "EMULATOR_TEST_KEY": "k3y"})
    try:
        line = p.stderr.readline()  # "llmsim-emulate: ... on http://127.0.0.1:PORT"
        url = line.strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:"), line
        while True:  # until it listens; a hang is bounded by pytest-timeout
            try:
                r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 3},
                               headers={"authorization": "Bearer k3y"})
                break
            except httpx.ConnectError:
                time.sleep(0.05)
        assert r.json()["usage"]["completion_tokens"] == 3
    finally:
        p.terminate()
        p.wait(10)


def test_cli_ctrl_c_ends_open_requests_with_an_error_and_exits_quietly() -> None:
    """Ctrl-C with requests in flight: a stream ends with an error event and [DONE], a waiting request gets a 503
    in OpenAI's shape, and the command exits 0 without a traceback (uvicorn alone let the grace period run out,
    then cut the streams, answered 500 and logged a traceback per request and a KeyboardInterrupt)."""
    p = subprocess.Popen([sys.executable, "-m", "llmsim.emulator.cli", "--model", MODEL, "--gpu", "a100-80gb",
                          "--port", "0", "--speedup", "5"], cwd=REPO, stderr=subprocess.PIPE, text=True)
    got: dict[str, object] = {}
    body = {"model": MODEL, "prompt": "x", "max_tokens": 50000}
    try:
        url = p.stderr.readline().strip().rsplit(" ", 1)[-1]
        lines: list[str] = []

        def stream() -> None:
            with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=30) as r:
                for line in r.iter_lines():
                    lines.append(line)

        def whole() -> None:
            got["whole"] = httpx.post(url + "/v1/completions", json=body, timeout=30)

        while True:  # until it listens; a hang is bounded by pytest-timeout
            try:
                httpx.get(url + "/health")
                break
            except httpx.ConnectError:
                time.sleep(0.05)
        threads = [threading.Thread(target=f, daemon=True) for f in (stream, whole)]
        for t in threads:
            t.start()
        while len(lines) < 6 or sample(scrape(url), "vllm:num_requests_running") < 2:
            time.sleep(0.02)
        p.send_signal(signal.SIGINT)
        for t in threads:
            t.join(30)
        assert p.wait(30) == 0
    finally:
        p.kill()
        p.wait(10)
    err = p.stderr.read()
    assert "Traceback" not in err and "Exception" not in err, err
    events = [x for x in lines if x.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and json.loads(events[-2][6:])["error"]["code"] == 503, events[-3:]
    w = got["whole"]
    assert isinstance(w, httpx.Response) and w.status_code == 503, w
    assert w.json()["error"] == {"message": "the emulator is shutting down", "type": "ServiceUnavailableError",
                                 "param": None, "code": 503}


def test_import_llmsim_does_not_import_fastapi() -> None:
    code = ("import sys, llmsim, llmsim.cluster.cluster; "
            "assert 'fastapi' not in sys.modules and 'uvicorn' not in sys.modules")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def test_cli_help_and_a_missing_serve_extra() -> None:
    """Without the serve extra, ``--help`` still works and says it is needed; serving names it in one line."""
    run = [sys.executable, "-c", WITHOUT_SERVE_EXTRA]
    p = subprocess.run([*run, "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "pip install 'llmsim[serve]'" in p.stdout, p.stderr
    p = subprocess.run([*run, "--model", MODEL, "--gpu", "a100-80gb"], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "pip install 'llmsim[serve]'" in lines[0], p.stderr


def test_listening_socket_sends_small_chunks_at_once() -> None:
    """The listener says IPPROTO_TCP and TCP_NODELAY, so asyncio sets TCP_NODELAY on each accepted connection:
    without it Nagle's algorithm holds each small SSE chunk until the client's delayed ACK (~40 ms late)."""
    sock = listen_socket("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP and sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        sock.close()
