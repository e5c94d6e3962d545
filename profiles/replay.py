"""Replay a recorded serving run through llmsim and compare latencies with the measured ones.

    python -m llmsim.profiles replay --requests FILE --model M --gpu G [--tp N] [--dp N]
        [--enable-expert-parallel] [--policy chunked] [--max-num-batched-tokens 2048] [--max-num-seqs 256]
        [--block-size 16] [--no-enable-prefix-caching] [--gpu-memory-utilization 0.9] [--json]
        [--timeline] [--plot timeline.png] [--overhead-per-iteration S] [--overhead-per-seq S]

M is a registered model name (qwen3-32b), a Hugging Face id whose config.json is in the local hub cache
(Qwen/Qwen3-32B) or the path of a config.json. FILE is either vLLM-bench style JSON lines (LLMServingSim
``requests.jsonl``: input_toks, output_toks, arrival_time / queued_ts, first_token_ts, last_token_ts), a
``vllm bench serve --save-result --save-detailed`` result JSON (input_lens, output_lens, start_times, ttfts,
latencies or itls, errors: the failed requests are counted and left out) or a CSV with
columns ``arrival, prompt_tokens, output_tokens`` and optionally measured ``ttft`` and ``e2e`` (seconds) or
``first_token, finish`` timestamps. The engine settings (TP, DP, expert parallelism, chunked prefill, prefix
caching, block size, batch limits, memory use) come from the run's ``meta.json`` unless a flag gives them
(profiles/replay_deploy.py); the replay prints each with its source. Prints simulated vs measured mean / median /
p90 of TTFT, TPOT and E2E latency (ms) and where each part of the profile comes from; ``--json`` prints one JSON
object per row (metric, simulated, measured, error_pct) and the settings on stderr. ``--timeline`` / ``--plot``
compare the per-second running / waiting (/ KV) curves with the run's ``timeseries.csv``
(profiles/replay_timeline.py); ``--overhead-*`` replay with another CPU overhead, ``--no-decode-skew`` without the
profile's skewed-decode term (llmsim.perf.decode_skew).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from itertools import compress
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmsim.cluster import InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.engine.iteration import without_decode_skew
from llmsim.errors import LLMSimError, TraceError
from llmsim.perf.hf_config import looks_like_path
from llmsim.perf.models import ModelSpec, get_model, registered_model
from llmsim.perf.parallel import check_degrees
from llmsim.perf.profile import load_profile
from llmsim.profiles.replay_deploy import (
    describe_settings,
    expert_parallel_degree,
    profile_parts,
    read_meta,
    resolve,
)
from llmsim.profiles.replay_timeline import align, plot, plot_path, print_table, read_timeseries
from llmsim.request import MAX_TOKENS, Request
from llmsim.simulation.run import simulate


@dataclass
class Recorded:
    arrival: np.ndarray  # seconds from the first arrival
    prompt: np.ndarray
    output: np.ndarray
    ttft: np.ndarray | None  # seconds, measured
    e2e: np.ndarray | None
    failed: int = 0  # requests of the run that failed (a vllm bench serve result's errors): not replayed


def _jsonl_rows(p: Path) -> pd.DataFrame:
    """JSON lines, each parsed alone so an error names its line; blank lines are skipped."""
    rows, lines = [], []
    for n, line in enumerate(p.read_text(errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise TraceError(f"{p}: line {n}: expected a JSON object, got {line[:60]!r} ({e.msg})") from None
        if not isinstance(row, dict):
            raise TraceError(f"{p}: line {n}: expected a JSON object, got {type(row).__name__}")
        rows.append(row)
        lines.append(n)
    if not rows:
        raise TraceError(f"{p}: no request in the file (it is empty or blank); expected one JSON object per line")
    df = pd.DataFrame(rows)
    df.index = lines
    return df


def _column(p: Path, df: pd.DataFrame, key: str, integer: bool, where: str) -> np.ndarray:
    """One column as finite numbers (positive integers for token counts), else an error naming line and key."""
    vals = pd.to_numeric(df[key], errors="coerce").to_numpy(float)
    bad = ~np.isfinite(vals)
    if integer:
        bad |= (vals < 1) | (vals > MAX_TOKENS) | (vals != np.round(vals))
    if bad.any():
        i = int(np.argmax(bad))
        what = f"an integer in [1, {MAX_TOKENS}]" if integer else "a finite number"
        raise TraceError(f"{p}: {where} {df.index[i]}: {key}: expected {what}, got {df[key].iloc[i]!r}")
    return vals.astype(np.int64) if integer else vals


_VLLM_RESULT_KEYS = ("input_lens", "output_lens", "ttfts", "start_times")


def _vllm_result(p: Path, obj: dict) -> Recorded:
    """A ``vllm bench serve --save-result --save-detailed`` result: per-request lists, one entry per request.

    Only successful requests are replayed and compared (vLLM's latency statistics cover those alone); the failed
    ones (a non-empty ``errors`` entry) are counted in ``Recorded.failed``. E2E is ``latencies`` when saved, else
    ttft + the sum of ``itls`` (the same number: the last chunk's time minus the start)."""
    missing = [k for k in _VLLM_RESULT_KEYS if k not in obj]
    if missing:
        raise TraceError(f"{p}: a vllm bench serve result without per-request {missing} (save it with --save-result "
                         f"--save-detailed from a vLLM that records start_times); cannot replay the arrivals")
    if "latencies" not in obj and "itls" not in obj:
        raise TraceError(f"{p}: a vllm bench serve result needs 'latencies' or 'itls' for the end-to-end latency")
    cols = {k: obj[k] for k in (*_VLLM_RESULT_KEYS, "latencies", "itls", "errors") if k in obj}
    n = len(obj["input_lens"]) if isinstance(obj["input_lens"], list) else -1
    for k, v in cols.items():
        if not isinstance(v, list) or len(v) != n:
            raise TraceError(f"{p}: {k}: expected a list of one entry per request (as many as input_lens), got "
                             f"{type(v).__name__}{f' of {len(v)}' if isinstance(v, list) else ''}")
    errors = cols.get("errors", [""] * n)
    ok = [not e for e in errors]
    if not any(ok):
        raise TraceError(f"{p}: no successful request in the vllm bench serve result ({len(ok)} failed)")
    df = pd.DataFrame({k: list(compress(v, ok)) for k, v in cols.items() if k not in ("itls", "errors")})
    df.index = [i for i, good in enumerate(ok) if good]
    if "latencies" not in df.columns:
        gaps = list(compress(cols["itls"], ok))
        if not all(isinstance(g, list) and all(isinstance(x, int | float) for x in g) for g in gaps):
            raise TraceError(f"{p}: itls: expected a list of numbers per request")
        df["latencies"] = pd.to_numeric(df["ttfts"], errors="coerce") + [float(sum(g)) for g in gaps]
    where = "request index"
    arr = _column(p, df, "start_times", False, where)
    ttft, e2e = _column(p, df, "ttfts", False, where), _column(p, df, "latencies", False, where)
    prompt, output = _column(p, df, "input_lens", True, where), _column(p, df, "output_lens", True, where)
    _check_latencies(p, df.index, ttft, e2e, where)
    return _recorded(arr, prompt, output, ttft, e2e, failed=len(ok) - int(df.shape[0]))


def read_requests(path: str | Path) -> Recorded:
    """A recorded run: LLMServingSim-style JSON lines, a vllm bench serve result JSON, or a CSV."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"requests file {p} does not exist or is not a file")
    if p.suffix == ".json":
        try:
            obj = json.loads(p.read_text(errors="replace"))
        except ValueError:
            obj = None  # not one JSON document: JSON lines below name the bad line
        if isinstance(obj, dict) and "input_lens" in obj:
            return _vllm_result(p, obj)
    if p.suffix in (".jsonl", ".json"):
        df, where = _jsonl_rows(p), "line"
        if "input_lens" in df.columns:
            raise TraceError(f"{p}: {len(df)} vllm bench serve results in one file (--append-result); "
                             f"replay one run at a time")
        for k in ("input_toks", "output_toks"):
            if k not in df.columns:
                raise TraceError(f"{p}: JSON lines need key {k!r} (have {sorted(df.columns)})")
        # queued_ts / first_token_ts / last_token_ts share one (monotonic) clock; arrival_time is wall clock.
        t0col = "queued_ts" if "queued_ts" in df.columns else "arrival_time"
        if t0col not in df.columns:
            raise TraceError(f"{p}: JSON lines need key 'queued_ts' or 'arrival_time' (have {sorted(df.columns)})")
        arr = _column(p, df, t0col, False, where)
        ttft = e2e = None
        if "first_token_ts" in df.columns and "last_token_ts" in df.columns and t0col == "queued_ts":
            ttft = _column(p, df, "first_token_ts", False, where) - arr
            e2e = _column(p, df, "last_token_ts", False, where) - arr
        prompt, output = _column(p, df, "input_toks", True, where), _column(p, df, "output_toks", True, where)
    else:
        try:
            df = pd.read_csv(p)
        except (ValueError, UnicodeDecodeError) as e:  # EmptyDataError / ParserError are ValueErrors
            raise TraceError(f"{p}: not a readable CSV ({' '.join(str(e).split())})") from None
        if df.empty:
            raise TraceError(f"{p}: no request in the file (a header without rows)")
        df.index = np.arange(len(df)) + 2  # file line numbers after the header
        for k in ("arrival", "prompt_tokens", "output_tokens"):
            if k not in df.columns:
                raise TraceError(f"{p}: CSV needs column {k!r} (have {list(df.columns)})")
        where = "line"
        arr = _column(p, df, "arrival", False, where)
        ttft = e2e = None
        if "ttft" in df.columns and "e2e" in df.columns:
            ttft, e2e = _column(p, df, "ttft", False, where), _column(p, df, "e2e", False, where)
        elif "first_token" in df.columns and "finish" in df.columns:
            ttft = _column(p, df, "first_token", False, where) - arr
            e2e = _column(p, df, "finish", False, where) - arr
        prompt, output = _column(p, df, "prompt_tokens", True, where), _column(p, df, "output_tokens", True, where)
    _check_latencies(p, df.index, ttft, e2e, where)
    return _recorded(arr, prompt, output, ttft, e2e)


def _check_latencies(p: Path, index: pd.Index, ttft: np.ndarray | None, e2e: np.ndarray | None, where: str) -> None:
    """Measured latencies must be causal (arrival <= first token <= last token): a clock mix-up would otherwise
    turn into negative measured TTFTs and a comparison against nonsense."""
    if ttft is None or e2e is None:
        return
    bad = (ttft < 0) | (e2e < ttft)
    if bad.any():
        i = int(np.argmax(bad))
        raise TraceError(f"{p}: {where} {index[i]}: measured TTFT {ttft[i]:.6g} s, E2E {e2e[i]:.6g} s: expected "
                         f"0 <= TTFT <= E2E (first token after the arrival, last token after the first)")


def _recorded(arr: np.ndarray, prompt: np.ndarray, output: np.ndarray, ttft: np.ndarray | None,
              e2e: np.ndarray | None, failed: int = 0) -> Recorded:
    """The requests in arrival order, arrivals from the first one."""
    order = np.argsort(arr, kind="stable")
    arr = arr[order] - arr[order][0]
    return Recorded(arr, prompt[order], output[order], None if ttft is None else ttft[order],
                    None if e2e is None else e2e[order], failed)


def stats(ttft_s: np.ndarray, e2e_s: np.ndarray, output: np.ndarray) -> dict[str, float]:
    """vLLM-bench definitions: TPOT = (e2e - ttft) / (output - 1) over requests with > 1 output token; a metric
    with no value (every output one token long) is NaN, not an error."""
    m = output > 1
    tpot = (e2e_s[m] - ttft_s[m]) / (output[m] - 1)
    out = {}
    for name, v in (("ttft", ttft_s), ("tpot", tpot), ("e2el", e2e_s)):
        v = v * 1e3
        if not v.size:
            out.update({f"{k}_{name}_ms": math.nan for k in ("mean", "median", "p90")})
            continue
        out[f"mean_{name}_ms"] = float(np.mean(v))
        out[f"median_{name}_ms"] = float(np.median(v))
        out[f"p90_{name}_ms"] = float(np.percentile(v, 90))
    return out


def simulate_recorded(rec: Recorded, *args: Any, **kwargs: Any) -> tuple[dict[str, float], list[str]]:
    """Simulated TTFT / TPOT / E2E statistics of the recorded requests (and notes on the profile used); the
    arguments of :func:`simulate_run`."""
    sim, notes, _ = simulate_run(rec, *args, **kwargs)
    return sim, notes


def simulate_run(
    rec: Recorded,
    model: str,
    gpu: str,
    tp: int = 1,
    policy: str = "chunked",
    max_num_batched_tokens: int | None = 2048,
    max_num_seqs: int = 256,
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | None = None,
    profile_kind: str = "auto",
    overhead: dict[str, float] | None = None,
    *,
    dp: int = 1,
    ep: int = 1,
    block_size: int = 16,
    enable_prefix_caching: bool = True,
    kv_cache_dtype: str = "auto",
    decode_skew: bool = True,
) -> tuple[dict[str, float], list[str], pd.DataFrame]:
    """:func:`simulate_recorded` plus the simulated timeline (one row per second: running, waiting, KV blocks).

    ``dp`` engines (each ``tp`` GPUs) share the requests through vLLM's data-parallel balancer; ``ep`` spreads a
    mixture-of-experts model's experts over that many GPUs. ``overhead`` (``per_iteration`` / ``per_seq`` seconds)
    replaces the profile's CPU overhead (measured profiles only): what-if replays and
    ``python -m llmsim.profiles calibrate``; ``decode_skew=False`` replays without the skewed-decode term."""
    prof = load_profile(model, gpu, tp, profile_kind, ep=ep, kv_cache_dtype=kv_cache_dtype)
    if not decode_skew:
        prof = without_decode_skew(prof)
    if overhead:
        if not hasattr(prof, "with_overhead"):
            raise LLMSimError(f"--overhead-*: {prof.name} is a roofline profile; only measured ones take an override")
        prof = prof.with_overhead(overhead.get("per_iteration"), overhead.get("per_seq"), "replay override")
    mml = int(max(rec.prompt + rec.output)) + 16 if max_model_len is None else max_model_len  # 0: refused, not unset
    eng = EngineConfig(
        policy=policy,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=mml,
        gpu_memory_utilization=gpu_memory_utilization,
        block_size=block_size,
        enable_prefix_caching=enable_prefix_caching,
    )
    inst = InstanceConfig(model=model, gpu=gpu, tp=tp, profile=prof, engine=eng, ep=ep)
    reqs = [
        Request(i, float(a), int(p), int(o)) for i, (a, p, o) in enumerate(zip(rec.arrival, rec.prompt, rec.output))
    ]
    router = "vllm_data_parallel" if dp > 1 else "round_robin"
    res = simulate(instances=[inst] * dp, requests=reqs, policy=router, seed=0)
    df = res.requests.sort_values("id")
    ttft = (df.first_token - df.arrival).to_numpy(float)
    e2e = (df.finish - df.arrival).to_numpy(float)
    notes = list(getattr(res, "notes", []) or [])
    d = prof.describe()
    kind = "" if d["name"].endswith(")") else f" ({d.get('kind', 'unknown')})"  # a measured name carries its own
    notes.append(f"profile {d['name']}{kind}: {profile_parts(d)}")
    if ep > 1 and "ep" not in d:
        notes.append(f"expert parallelism ep={ep}: the {d.get('kind', '')} profile {d['name']} prices the experts "
                     f"as measured at tp={tp}, without the all-to-all or the split of expert weights")
    return stats(ttft, e2e, df.output_tokens.to_numpy(int)), notes, res.timeline


def compare(sim: dict[str, float], meas: dict[str, float] | None) -> list[dict]:
    rows = []
    for k, v in sim.items():
        m = None if meas is None else meas.get(k)
        err = None if m in (None, 0) else (v - m) / m * 100
        rows.append(
            {
                "metric": k,
                "simulated": None if math.isnan(v) else round(v, 3),
                "measured": None if m is None or math.isnan(m) else round(m, 3),
                "error_pct": None if err is None or math.isnan(err) else round(err, 2),
            }
        )
    return rows


def recorded_deployment(requests: str | Path, model: str,
                        args: argparse.Namespace | None = None) -> tuple[dict[str, Any], list[str]]:
    """The :func:`simulate_run` keyword arguments of the deployment a run recorded (its meta.json, strictly read;
    ``args``' flags override it) and the notes: every setting with its source, then a warning per contradicting
    flag. Shared by ``replay`` and ``calibrate``, so both replay the same deployment."""
    f, meta = read_meta(requests)
    settings, warnings = resolve(args or argparse.Namespace(), meta)
    value = {k: s.value for k, s in settings.items()}
    spec = get_model(model)
    check_recorded_model(f, meta, model, spec)
    ep = expert_parallel_degree(settings, spec)
    check_degrees(spec, value["tp"], ep, value["dp"])
    policy = getattr(args, "policy", None) or ("chunked" if value["chunked_prefill"] else "vllm_v0")
    kwargs = {"tp": value["tp"], "policy": policy, "max_num_batched_tokens": value["max_num_batched_tokens"],
              "max_num_seqs": value["max_num_seqs"], "gpu_memory_utilization": value["gpu_memory_utilization"],
              "max_model_len": value["max_model_len"], "dp": value["dp"], "ep": ep,
              "block_size": value["block_size"], "enable_prefix_caching": value["prefix_caching"],
              "kv_cache_dtype": value["kv_cache_dtype"]}
    notes = [f"setting {line}" for line in describe_settings(settings, spec)] + [f"warning: {w}" for w in warnings]
    return kwargs, notes


LAYER_SHAPE = ("n_layers", "hidden", "n_heads", "n_kv_heads", "intermediate", "vocab", "n_experts",
               "experts_per_token", "moe_intermediate")


def check_recorded_model(f: Path, meta: dict[str, Any], model: str, spec: ModelSpec) -> None:
    """The run's ``model`` engine argument, when it names a registered model (name, alias or Hugging Face id),
    must have ``spec``'s layers: another model's step times compared with the run's latencies are no check. A local
    checkpoint path or an unregistered id is not checked (its layers are not known here)."""
    recorded = meta.get("model")
    if not isinstance(recorded, str) or looks_like_path(recorded):
        return
    known = registered_model(recorded)
    if known is not None and any(getattr(known, k) != getattr(spec, k) for k in LAYER_SHAPE):
        raise TraceError(f"{f}: model={recorded!r} is {known.name}, not --model {model} ({spec.name}, other "
                         "layers): the replay would compare another model with the one measured")


def replay_from_args(args: argparse.Namespace) -> tuple[list[dict], list[str], pd.DataFrame]:
    """The comparison rows, notes and simulated timeline of the replay the command line asks for; the notes start
    with every engine setting and its source (flag / meta.json / default) and a warning per contradicting flag."""
    rec = read_requests(args.requests)
    deployment, head = recorded_deployment(args.requests, args.model, args)
    overhead = {k: v for k, v in (("per_iteration", getattr(args, "overhead_per_iteration", None)),
                                  ("per_seq", getattr(args, "overhead_per_seq", None))) if v is not None}
    sim, notes, timeline = simulate_run(
        rec, args.model, args.gpu, profile_kind=args.profile_kind, overhead=overhead or None,
        decode_skew=not getattr(args, "no_decode_skew", False), **deployment,
    )
    meas = None if rec.ttft is None else stats(rec.ttft, rec.e2e, rec.output)
    if rec.failed:
        notes.append(f"{rec.failed} failed request(s) of the run not replayed (vLLM's latency statistics cover the "
                     f"successful ones only)")
    return compare(sim, meas), head + notes, timeline


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``replay`` verb's flags; the engine settings default to the run's meta.json, then vLLM's defaults."""
    ap.add_argument("--requests", required=True, help="requests.jsonl (LLMServingSim), a vllm bench serve "
                    "--save-detailed result .json, or CSV")
    ap.add_argument("--model", required=True, help="a registered name (qwen3-32b), a Hugging Face id whose "
                    "config.json is in the local hub cache (Qwen/Qwen3-32B), or a config.json path")
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--tp", type=int, default=None, help="tensor-parallel degree (meta: tensor_parallel_size; 1)")
    ap.add_argument("--dp", type=int, default=None, help="data-parallel engines (meta: data_parallel_size; 1)")
    ap.add_argument("--enable-expert-parallel", action=argparse.BooleanOptionalAction, default=None,
                    help="spread a MoE model's experts over tp x dp GPUs (meta: enable_expert_parallel; off)")
    ap.add_argument("--policy", default=None, help="engine batching policy: chunked | vllm_v0 "
                    "(meta: enable_chunked_prefill; chunked)")
    ap.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                    help="(meta: enable_prefix_caching; on)")
    ap.add_argument("--block-size", type=int, default=None, help="KV block tokens (meta: block_size; 16)")
    ap.add_argument("--max-num-batched-tokens", type=int, default=None, help="(meta: max_num_batched_tokens; 2048)")
    ap.add_argument("--max-num-seqs", type=int, default=None, help="(meta: max_num_seqs; 256)")
    ap.add_argument("--max-model-len", type=int, default=None,
                    help="(meta: max_model_len; the longest request + 16)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=None, help="(meta: gpu_memory_utilization; 0.9)")
    ap.add_argument("--kv-cache-dtype", default=None, help="auto | fp8 | ... (meta: kv_cache_dtype; auto)")
    ap.add_argument("--profile-kind", default="auto", choices=["auto", "measured", "roofline"])
    ap.add_argument("--json", action="store_true", help="one JSON object per metric (the settings go to stderr)")
    ap.add_argument("--timeline", action="store_true", help="per-second running / waiting next to timeseries.csv")
    ap.add_argument("--plot", type=plot_path, default=None,
                    help="write the timeline comparison here (a .png, or another matplotlib format)")
    ap.add_argument("--overhead-per-iteration", type=float, default=None, help="CPU overhead override (s)")
    ap.add_argument("--overhead-per-seq", type=float, default=None, help="CPU overhead override (s per sequence)")
    ap.add_argument("--no-decode-skew", action="store_true",
                    help="leave out the profile's skewed-decode term (decode_skew): the summed-context model alone")


def run(args: argparse.Namespace) -> int:
    """Replay, then print the comparison (a table, or ``--json`` lines) and the timeline; exit 2 on bad input."""
    try:
        rows, notes, timeline = replay_from_args(args)
        al = aligned(args.requests, timeline) if args.timeline or args.plot else None
    except LLMSimError as e:
        print(f"{args.prog}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    if args.json:
        for r in rows:
            print(json.dumps(r))
        for n in notes:
            print("note:", n, file=sys.stderr)
        return 0
    print(f"{'metric':<18}{'simulated':>12}{'measured':>12}{'error %':>10}")
    for r in rows:
        meas = "-" if r["measured"] is None else f"{r['measured']:.1f}"
        err = "-" if r["error_pct"] is None else f"{r['error_pct']:+.1f}"
        sim = "-" if r["simulated"] is None else f"{r['simulated']:.1f}"
        print(f"{r['metric']:<18}{sim:>12}{meas:>12}{err:>10}")
    for n in notes:
        print("note:", n)
    if al is not None and args.timeline:
        print_table(al)
    if al is not None and args.plot:
        run_name = "/".join(Path(args.requests).parts[-4:-1])
        print("timeline plot:", plot(al, args.plot, f"{args.model} on {args.gpu}: {run_name}"))
    return 0


def aligned(requests: str | Path, timeline: pd.DataFrame) -> pd.DataFrame:
    """The simulated timeline next to the run's measured ``timeseries.csv`` (a TraceError when there is none)."""
    got = read_timeseries(requests)
    if got is None:
        raise TraceError(f"{Path(requests).parent}: no timeseries.csv next to the requests (--timeline, --plot)")
    measured, offset = got
    return align(timeline, measured, offset)


if __name__ == "__main__":  # not a command of its own: the room has one entry
    print(f"{__spec__.name} is not a command; run: python -m llmsim.profiles replay --help", file=sys.stderr)
    raise SystemExit(2)
