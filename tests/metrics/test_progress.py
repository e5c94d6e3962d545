"""Progress while a simulation runs (:class:`llmsim.metrics.progress.SimProgress`): completions not arrivals, the
drain after the last arrival, throttled lines off a terminal, a bar on one with a width, and observers removed."""

from __future__ import annotations

import io
import re
import sys

import pytest

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.cluster import Cluster
from llmsim.metrics.progress import SimProgress
from llmsim.routing import make_router
from llmsim.testing import LinearProfile, requests


def _busy_run(progress):
    # one slow instance, arrivals much faster than service: a long drain after the last arrival
    reqs = requests([(0.01 * i, 40, 20) for i in range(300)])
    inst = [InstanceConfig(profile=LinearProfile(base=0.02, per_token=0.0005), engine=EngineConfig(max_num_seqs=4))]
    return simulate(inst, reqs, "round_robin", progress=progress, total=300)


_LINE = re.compile(r"^llmsim: ([\d,]+)/([\d,]+) requests done \(\d+ %\), (draining, )?([\d,]+) in flight, "
                   r"sim [\d,]+ s, [\d,]+ req/s$")


def test_progress_lines_count_completions_and_show_the_drain():
    buf = io.StringIO()
    prog = SimProgress(stream=buf, line_every_s=0.0, check_every=1)
    res = _busy_run(prog)
    assert res.summary["completed"] == 300
    lines = buf.getvalue().splitlines()
    assert len(lines) == 300 == prog.lines  # check_every=1, no minimum interval: one line per completion
    parsed = []
    for line in lines:
        m = _LINE.match(line)
        assert m, line
        parsed.append((int(m[1].replace(",", "")), int(m[2]), bool(m[3]), int(m[4].replace(",", ""))))
    assert [d for d, *_ in parsed] == list(range(1, 301))  # completions, one by one, not arrivals
    assert all(total == 300 for _, total, _, _ in parsed)
    drain = [p for p in parsed if p[2]]
    assert drain and drain[-1][3] == 0 and drain[0][3] > 50  # a long drain, shown as such
    assert all(d + f == 300 for d, _, _, f in drain)  # after the last arrival: done + in flight = all
    assert any(not p[2] and p[3] > 0 for p in parsed)  # in flight before the drain too
    assert "\r" not in buf.getvalue()


def test_progress_lines_are_throttled():
    buf = io.StringIO()
    _busy_run(SimProgress(stream=buf, line_every_s=3600.0))
    assert buf.getvalue() == ""  # a short run on a non-terminal prints nothing between its 5 s marks


def test_progress_bar_on_a_terminal():
    buf = io.StringIO()
    prog = SimProgress(stream=buf, tty=True, refresh_s=0.0, check_every=1)
    _busy_run(prog)
    text = buf.getvalue()
    assert "requests done" in text and "300/300" in text and "draining, " in text and "in flight" in text
    assert prog.lines == 0  # bar mode prints no log lines


def test_progress_hooks_are_removed_and_absent_when_off():
    cluster = Cluster([InstanceConfig(profile=LinearProfile())], make_router("round_robin"))
    prog = SimProgress(stream=io.StringIO(), tty=False)
    rec = cluster.recorder
    before = (list(rec.finish_observers), list(rec.drop_observers))
    prog.attach(cluster, 5)
    assert prog.on_finish in rec.finish_observers and prog.on_drop in rec.drop_observers and prog.total == 5
    prog.close()
    assert (rec.finish_observers, rec.drop_observers) == before
    assert SimProgress().line_every_s == 5.0 and SimProgress().refresh_s == 0.1


@pytest.mark.skipif(sys.platform == "win32", reason="pty")
def test_progress_draws_a_bar_only_on_a_terminal_with_a_width():
    import fcntl  # POSIX only, as the skip says
    import os
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    try:
        with os.fdopen(os.dup(slave), "w") as tty:
            assert not SimProgress(stream=tty).tty  # 0 columns: tqdm would draw nothing; lines instead
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
            assert SimProgress(stream=tty).tty
        assert not SimProgress(stream=io.StringIO()).tty
    finally:
        os.close(master)
        os.close(slave)
