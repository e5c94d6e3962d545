"""Requests carry block identities (issue 17): the hash_ids contract on the shared-prefix generator, multi-turn
chaining, the reuse knob, determinism, config errors, BurstGPT sessions and the Mooncake ideal hit rate."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from llmsim.cluster import InstanceConfig
from llmsim.engine.prefix_cache import block_keys
from llmsim.errors import ConfigError, TraceError
from llmsim.request import Request
from llmsim.simulation import simulate
from llmsim.workload import (
    BurstGPTTrace,
    Fixed,
    GammaArrivals,
    Independent,
    MooncakeTrace,
    PromptPool,
    RateScaled,
    SessionIds,
    SharedPrefixWorkload,
    build_workload,
)
from llmsim.workload.prefix_hits import ideal_prefix_hit_rate, ideal_prefix_hits, main
from tests.workload.helpers import burstgpt_rows, write_burstgpt

CFG = {
    "kind": "shared_prefix", "arrival": {"process": "poisson", "rate": 2.0}, "num_requests": 400,
    "system": {"count": 4, "tokens": 100, "zipf": 1.0}, "fewshot": {"count": 3, "tokens": 40, "prob": 0.5},
    "turns": {"dist": "uniform", "min": 1, "max": 5}, "think_time": 10.0,
    "user": {"dist": "lognormal", "mean": 60, "sigma": 1.0, "max": 400}, "output": {"dist": "uniform", "min": 1,
                                                                                   "max": 200},
    "max_prompt": 2000, "hash_block": 16,
}


def _reqs(seed: int = 0, **over: object) -> list[Request]:
    return list(build_workload({**CFG, **over}, seed))


def _check_chained(reqs: list[Request]) -> None:
    """Every id names one prefix: wherever it appears, the ids before it are the same (chained prefix ids)."""
    named: dict[int, tuple[int, ...]] = {}
    for r in reqs:
        assert r.hash_ids is not None and r.hash_block == 16
        assert len(r.hash_ids) == math.ceil((r.prompt_tokens + r.output_tokens) / 16)  # prompt + output covered
        for i, h in enumerate(r.hash_ids):
            prefix = r.hash_ids[: i + 1]
            assert named.setdefault(h, prefix) == prefix  # same id => same chain before it (chained prefix ids)


def test_ids_are_chained_prefix_ids_and_arrivals_sorted() -> None:
    reqs = _reqs()
    assert [r.id for r in reqs] == list(range(400))
    assert all(a.arrival <= b.arrival for a, b in zip(reqs, reqs[1:]))
    _check_chained(reqs)
    # a shared system prompt gives the same leading ids to sessions that start with it
    firsts = [r for r in reqs if r.extra["turn"] == 1]
    lead = {r.hash_ids[:6] for r in firsts}  # 100 tokens: 6 full blocks of 16
    assert 1 < len(lead) <= 4


def test_next_turn_extends_previous_prompt_and_output() -> None:
    reqs = _reqs()
    last: dict[int, Request] = {}
    chained = 0
    for r in reqs:
        s = r.extra["session_id"]
        prev = last.get(s)
        if prev is not None:
            assert r.extra["turn"] == prev.extra["turn"] + 1 and r.arrival >= prev.arrival
            ctx = prev.prompt_tokens + prev.output_tokens
            assert r.prompt_tokens > ctx  # previous context + a new user message
            full = ctx // 16
            assert r.hash_ids[:full] == prev.hash_ids[:full]  # reuses the previous prompt + output ...
            if ctx % 16:  # ... but a partial block it extends holds new content: a new id
                assert r.hash_ids[full] != prev.hash_ids[full]
            assert not set(r.hash_ids[full:]) & set(prev.hash_ids)
            chained += 1
        last[s] = r
    assert chained > 100


def test_reuse_knob_moves_the_ideal_hit_rate_monotonically() -> None:
    rates = []
    base = None
    for reuse in (0.0, 0.25, 0.5, 0.75, 1.0):
        reqs = _reqs(reuse=reuse)
        shape = [(r.arrival, r.prompt_tokens, r.output_tokens) for r in reqs]
        assert base is None or shape == base  # only the ids change with the knob
        base = shape
        rates.append((ideal_prefix_hit_rate(reqs), ideal_prefix_hit_rate(reqs, block_size=16)))
    for col in (0, 1):
        values = [r[col] for r in rates]
        assert values == sorted(values) and values[-1] > values[0] + 0.05


def test_same_seed_same_requests_across_calls_and_iterations() -> None:
    def key(reqs: list[Request]) -> list[tuple]:
        return [(r.id, r.arrival, r.prompt_tokens, r.output_tokens, r.hash_ids, r.extra) for r in reqs]

    wl = build_workload(CFG, 3)
    assert key(list(wl)) == key(list(wl)) == key(_reqs(3))
    assert key(_reqs(4)) != key(_reqs(3))


def test_lazy_bounded_stream_and_python_api() -> None:
    wl = SharedPrefixWorkload(GammaArrivals(5.0, 1.0), Independent(Fixed(20), Fixed(10)), seed=1, duration=30.0,
                              system=PromptPool(2, 64), turns=Fixed(3), think_time=1.0)
    it = iter(wl)
    first = next(it)
    assert first.prompt_tokens == 64 + 20 and first.extra == {"session_id": 0, "turn": 1}
    reqs = [first, *it]
    assert wl.stats.stopped == "duration" and all(r.arrival < 30.0 for r in reqs)
    assert {r.prompt_tokens for r in reqs} == {84, 84 + 30, 84 + 60}
    assert wl.describe()["system"] == {"count": 2, "tokens": 64, "zipf": 1.0, "prob": 1.0}


def test_prompt_pool_probability() -> None:
    alone = _reqs(system={"count": 4, "tokens": 100, "prob": 0.0}, fewshot=None)
    assert all(r.prompt_tokens <= 400 for r in alone if r.extra["turn"] == 1)  # the user message only
    both = _reqs(system={"count": 4, "tokens": 100}, fewshot={"count": 3, "tokens": 40})
    assert all(r.prompt_tokens > 140 for r in both if r.extra["turn"] == 1)


def test_max_prompt_ends_sessions() -> None:
    reqs = _reqs(turns=20, max_prompt=600)
    assert all(r.prompt_tokens <= 600 or r.extra["turn"] == 1 for r in reqs)
    assert max(r.extra["turn"] for r in reqs) < 20


@pytest.mark.parametrize("key,value,match", [
    ("reuse", 1.5, "workload.reuse"),
    ("reuse", True, "workload.reuse"),
    ("hash_block", 0, "workload.hash_block"),
    ("think_time", -1, "workload.think_time"),
    ("max_prompt", 0, "workload.max_prompt"),
    ("turns", {"dist": "uniform", "min": 0, "max": 3}, "workload.turns.min"),
    ("system", {"count": 0, "tokens": 10}, "workload.system.count"),
    ("fewshot", {"count": 2, "tokens": 10, "prob": 2}, "workload.fewshot.prob"),
    ("system", {"count": 2, "tokens": 10, "zipf": -1}, "workload.system.zipf"),
    ("user", {"dist": "nope"}, "workload.user.dist"),
    ("reuze", 0.5, "reuze"),
])
def test_bad_config_names_the_key(key: str, value: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        build_workload({**CFG, key: value}, 0)
    assert "\n" not in str(e.value)


def test_config_needs_lengths_and_a_bound() -> None:
    cfg = {k: v for k, v in CFG.items() if k != "user"}
    with pytest.raises(ConfigError, match="'user'"):
        build_workload(cfg, 0)
    with pytest.raises(ConfigError, match="num_requests"):
        build_workload({**CFG, "num_requests": None}, 0)
    assert len(list(build_workload({**CFG, "num_requests": None, "max_requests": 7}, 0))) == 7


def test_session_ids_rule() -> None:
    s = SessionIds(hash_block=10)
    a = s.assign("x", 25, 10)  # 35 tokens: 4 ids
    b = s.assign("x", 50, 5)  # prompt >= 35: shares 3 full blocks of the 35, the partial 4th is new
    assert len(a) == 4 and len(b) == 6 and b[:3] == a[:3] and not set(b[3:]) & set(a)
    c = s.assign("x", 22, 3)  # shorter than the 55-token context: shares its first 22 tokens (2 blocks)
    assert c[:2] == b[:2] and not set(c[2:]) & set(a + b)
    d = s.assign("", 30, 1)  # no session: fresh ids
    assert not set(d) & set(a + b + c)


def test_burstgpt_sessions(tmp_path: Path) -> None:
    rows = burstgpt_rows(n=60, seed=1)
    sid = np.where(rows["Log Type"] == "Conversation log", np.array(["s1", "s2"])[np.arange(60) % 2], "")
    rows["Session ID"] = sid
    # make the conversation turns grow so each includes the previous one's history
    tokens = rows["Request tokens"].to_numpy().copy()
    for s in ("s1", "s2"):
        idx = np.flatnonzero(sid == s)
        tokens[idx] = 100 * np.arange(1, len(idx) + 1) ** 2
    rows["Request tokens"] = tokens
    rows["Response tokens"] = np.maximum(rows["Response tokens"].to_numpy(), 1) % 50 + 1
    path = write_burstgpt(tmp_path / "BurstGPT_3.csv", rows, "3")
    plain = list(BurstGPTTrace(path))
    assert all(r.hash_ids is None for r in plain)  # off by default: replays are unchanged
    reqs = list(build_workload({"kind": "burstgpt", "path": str(path), "sessions": True}, 0))
    last: dict[str, Request] = {}
    turns = 0
    for r in reqs:
        assert r.hash_block == 16 and len(r.hash_ids) == math.ceil((r.prompt_tokens + r.output_tokens) / 16)
        s = r.extra["session_id"]
        if s and s in last:
            prev = last[s]
            full = (prev.prompt_tokens + prev.output_tokens) // 16
            assert r.hash_ids[:full] == prev.hash_ids[:full]
            turns += 1
        elif last:
            assert not set(r.hash_ids) & {h for p in last.values() for h in p.hash_ids}
        if s:
            last[s] = r
    assert turns > 5 and 0 < ideal_prefix_hit_rate(reqs) < 1
    with pytest.raises(TraceError, match="Session ID"):
        list(BurstGPTTrace(write_burstgpt(tmp_path / "BurstGPT_1.csv", rows, "1"), sessions=True))
    with pytest.raises(ConfigError, match="workload.hash_block"):
        build_workload({"kind": "burstgpt", "path": str(path), "sessions": True, "hash_block": 0}, 0)


@pytest.mark.timeout(60)
def test_a_run_reports_the_conversations_forgotten_at_max_sessions(tmp_path: Path) -> None:
    """Four conversations taking turns past a cap of two: every turn after the first two forgets one (10 of 12
    rows), and the run says so in its summary and notes; under a cap that holds them all, nothing is reported."""
    rows = burstgpt_rows(n=12, seed=1)
    rows["Session ID"] = np.array([f"s{i % 4}" for i in range(12)])
    rows["Response tokens"] = np.maximum(rows["Response tokens"].to_numpy(), 1)
    path = write_burstgpt(tmp_path / "BurstGPT_3.csv", rows, "3")
    inst = [InstanceConfig("llama-2-7b", "a100-80gb")]
    capped = {"kind": "burstgpt", "path": str(path), "sessions": True, "max_sessions": 2}
    res = simulate(inst, build_workload(capped, 0), "round_robin", on_unservable="drop")
    assert res.summary["sessions_forgotten"] == 10
    assert [n for n in res.notes if "max_sessions=2" in n and ": 10;" in n and "prefix reuse" in n], res.notes
    scaled = RateScaled(build_workload(capped, 0), 2.0)  # a transform passes its trace's count on
    assert simulate(inst, scaled, "round_robin", on_unservable="drop").summary["sessions_forgotten"] == 10
    roomy = simulate(inst, build_workload({**capped, "max_sessions": 4}, 0), "round_robin", on_unservable="drop")
    assert "sessions_forgotten" not in roomy.summary and not [n for n in roomy.notes if "max_sessions" in n]


def test_ideal_hit_rate_definition() -> None:
    a = Request(0, 0.0, 40, 10, hash_ids=(1, 2, 3, 4, 5), hash_block=10)
    b = Request(1, 1.0, 55, 5, hash_ids=(1, 2, 3, 4, 5, 9), hash_block=10)  # prompt blocks 1..5 of a (4 via output)
    c = Request(2, 2.0, 30, 5)  # no ids: misses
    assert ideal_prefix_hits([a, b, c]) == (5, 4 + 6 + 1)
    assert ideal_prefix_hits([a, b], block_size=5) == (10, 8 + 11)
    assert block_keys(b, 5, 55)[:10] == block_keys(a, 5)[:10]
    assert ideal_prefix_hit_rate([]) == 0.0


def test_mooncake_ids_and_published_hit_rate(shared_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = shared_dir / "traces" / "mooncake" / "conversation_trace.jsonl"
    if not path.exists():
        pytest.skip(f"real trace {path} is not present in ../shared")
    reqs = list(MooncakeTrace(path))
    assert all(r.hash_block == 512 and len(r.hash_ids) == math.ceil(r.prompt_tokens / 512) for r in reqs)
    hits, blocks = ideal_prefix_hits(reqs)
    assert (hits, blocks) == (105710, 288500)
    assert round(100 * hits / blocks, 1) == 36.6  # PROVENANCE.md: "36.6 % of blocks seen before"
    assert main([str(path)]) == 0
    assert "36.64 %" in capsys.readouterr().out


def test_prefix_hits_says_how_many_rows_it_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A row with 0 output tokens (and a blank line) was left out of the hit rate without a word."""
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 600, "output_length": 0, "hash_ids": [0, 1]}\n\n'
                 '{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n'
                 '{"timestamp": 2, "input_length": 600, "output_length": 5, "hash_ids": [0, 2]}\n')
    assert main([str(p)]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"{p}: 2 requests, 4 prompt hash blocks, 1 hits: ideal prefix hit rate 25.00 %")
    assert out.endswith("; rows skipped (not counted): {'blank_line': 1, 'zero_output_tokens': 1}")


def test_mooncake_jitter_keeps_hash_block(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n'
                 '{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [0, 2]}\n')
    for jitter in (0.0, 3.0):
        reqs = list(MooncakeTrace(p, jitter_s=jitter))
        assert [r.hash_block for r in reqs] == [512, 512]
    assert ideal_prefix_hits(reqs) == (1, 4)
