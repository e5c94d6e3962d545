"""``llmsim-reproduce intelligent_router``: the headline claims of "Intelligent Router for LLM Workloads" (the
heuristic-guided RL router; the paper's sections 7.2 and 7.3).

Trains Baseline RL, Workload-Aware RL and Workload-Guided RL with the conf/experiment presets (``PRESET``; or
takes existing runs, ``from_runs``), evaluates their ``best/`` checkpoints and the env's automatic heuristics
(llmsim.agents.evaluate, ``baselines: auto``) on the same held-out seeds, and turns the per-policy summary into
claims with the harness's verdict rules (experiments/harness/claims.py).

The paper's "E2E latency" is ambiguous (mean per request, or the time to finish all requests, which the implied
~170 s round-robin figure suggests), so every learned router's gain is checked on both: mean E2E latency and time
to finish (the summary's makespan). Heuristic and ordering claims use mean E2E.

Sizes (experiments/harness/sizes.py): ``full`` is the presets as they are (2,000 requests, 5 seeds); ``quick`` a
much smaller setting that finishes in minutes on two cores and is labelled as not the paper's; ``tiny`` exists for
the test suite only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from experiments.harness.claims import claim_row, gain_verdict, order_verdict, pairs_in_order
from experiments.harness.pool import say
from experiments.harness.sizes import pick
from experiments.harness.training import checkpoint_dir, compose_experiment, evaluate, read_env, read_meta, train_all
from experiments.harness.zoo_routers import ZooRouter, instead_of, policy_lines, shipped, versus_reference
from llmsim.agents.evaluate import baseline_specs
from llmsim.errors import ConfigError

PAPER = "intelligent_router"
TESTBED = "workload_router"
ZOO_LABEL = "zoo_rl"  # the zoo's shipped router in the evaluation (quick and tiny sizes)
PRESET = "intelligent_router"  # conf/experiment/<PRESET>_<variant>.yaml and <PRESET>_8_<variant>.yaml
REFERENCE = "round_robin"
PAPER_HEURISTICS = ("jsq", "earliest_available", "max_capacity", "min_min")  # section 7.2's four
BEST_HEURISTIC_PCT = 2.60   # "heuristics <= 2.6 %" (Maximum Capacity Usage, the best of them)
EARLIEST_AVAILABLE_PCT = 2.48


@dataclass(frozen=True)
class Variant:
    """One learned router of the paper and its numbers."""

    key: str          # baseline | aware | guided: the preset <PRESET>_<key> / <PRESET>_8_<key>
    name: str
    guidance: str     # agent.guidance the preset trains with
    gain_pct: float   # E2E improvement vs round robin, 4 instances (section 7.2)
    gain8_pct: float  # the same on 8 instances (section 7.3)
    wait_s: float     # mean router wait (section 7.2)

    @property
    def label(self) -> str:
        return f"{self.key}_rl"


VARIANTS = (
    Variant("baseline", "Baseline RL", "none", 4.35, 5.84, 0.59),
    Variant("aware", "Workload-Aware RL", "aware", 7.79, 6.64, 4.41),
    Variant("guided", "Workload-Guided RL", "guided", 11.43, 11.62, 2.05),
)


@dataclass(frozen=True)
class Size:
    """Hydra overrides on top of the experiment presets (4 and 8 instances) and the number of held-out seeds."""

    overrides: tuple[str, ...]
    overrides8: tuple[str, ...]
    seeds: int
    note: str = ""


# quick: more gradient steps per env step and a larger learning rate than the presets, to learn anything at all
# in 8,000 steps (with the presets' train_freq 8 and lr 1e-4 the routers stay near their initial constant action)
_SMALL_AGENT = ("agent.buffer_size=50000", "agent.learning_starts=1000", "agent.target_update=500",
                "agent.train_freq=2", "agent.lr=5e-4")
SIZES = {
    "full": Size((), (), 5, "the presets' setting (the conf/experiment presets, unchanged); 5 held-out seeds where "
                 "the paper tests 20 episodes"),
    "quick": Size(
        ("env.num_requests=500", "trainer.total_steps=8000", "trainer.eval_every=4000", "agent.eps_episodes=6",
         *_SMALL_AGENT),
        ("env.num_requests=1000", "trainer.total_steps=8000", "trainer.eval_every=4000", "agent.eps_episodes=4",
         *_SMALL_AGENT),
        2,
        "QUICK setting, not the paper's: 500 requests (8 instances: 1,000) per episode, 8,000 training steps per "
        "router with faster-learning hyperparameters, 2 held-out seeds; the paper trains to convergence on 2,000 "
        "(4,000) requests and tests 20 episodes. For numbers to compare: the full run (no --quick) or --from-runs."),
    "tiny": Size(
        ("env.num_requests=40", "trainer.total_steps=400", "trainer.eval_every=400", "trainer.eval_seeds=[1000]",
         "agent.hidden=[16,16]", "agent.batch_size=32", "agent.learning_starts=100", "agent.buffer_size=2000",
         "agent.target_update=100", "agent.eps_episodes=2"),
        ("env.num_requests=60", "trainer.total_steps=300", "trainer.eval_every=300", "trainer.eval_seeds=[1000]",
         "agent.hidden=[16,16]", "agent.batch_size=32", "agent.learning_starts=100", "agent.buffer_size=2000",
         "agent.target_update=100", "agent.eps_episodes=2"),
        1,
        "TINY test setting: meaningless numbers (a wiring check of train, evaluate and claims)."),
}


def _log(msg: str) -> None:
    say("reproduce intelligent_router", msg)


# ---------------------------------------------------------------------- training
def train_variants(name: str, size: Size, root: Path, jobs: int, progress: bool, eight: bool = False) -> list[Path]:
    """Train the three variants (in up to ``jobs`` processes); their ``best/`` checkpoint directories."""
    prefix = f"{PRESET}_8_" if eight else f"{PRESET}_"
    overrides = size.overrides8 if eight else size.overrides
    workers = min(jobs, len(VARIANTS))
    cfgs, dirs = [], []
    for v in VARIANTS:
        cfg = compose_experiment(prefix + v.key, [*overrides,
                                                  f"trainer.progress={str(progress and workers == 1).lower()}"])
        cfgs.append(cfg)
        dirs.append(root / f"{prefix}{v.key}")
    _log(f"training {len(cfgs)} routers ({name}, {'8' if eight else '4'} instances, "
         f"{cfgs[0]['trainer']['total_steps']:,} steps each, {workers} process(es)) under {root}")
    train_all(cfgs, dirs, workers, _log)
    return [d / "best" for d in dirs]


# ---------------------------------------------------------------------- existing runs
def _guidance(ckpt: Path) -> str | None:
    """The checkpoint's agent.guidance from its config.yaml (None when it has none)."""
    f = ckpt / "config.yaml"
    if not f.is_file():
        return None
    agent = (yaml.safe_load(f.read_text()) or {}).get("agent") or {}
    return agent.get("guidance", "none")


def resolve_runs(spec: str | Sequence[str] | Mapping[str, str], instances: int, option: str) -> list[Path]:
    """BASELINE,AWARE,GUIDED directories (or a mapping baseline/aware/guided -> directory) -> their checkpoints,
    checked against the variant and instance count."""
    if isinstance(spec, Mapping):
        keys = [v.key for v in VARIANTS]
        if sorted(spec) != sorted(keys):
            raise ConfigError(f"{option}: expected the keys {', '.join(keys)}, got {', '.join(map(str, spec))}")
        spec = [str(spec[k]) for k in keys]
    parts = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else [str(s) for s in spec]
    if len(parts) != len(VARIANTS) or not all(parts):
        raise ConfigError(f"{option}: expected {len(VARIANTS)} comma-separated directories "
                          f"({','.join(v.key.upper() for v in VARIANTS)}), got {spec!r}")
    out = []
    for v, part in zip(VARIANTS, parts):
        ckpt = checkpoint_dir(part)
        got = _guidance(ckpt)
        if got is not None and got != v.guidance:
            raise ConfigError(f"{option}: {part} was trained with agent.guidance={got}, but position "
                              f"{VARIANTS.index(v) + 1} is {v.name} (guidance={v.guidance})")
        n = read_env(ckpt).get("num_instances", 4)
        if n != instances:
            raise ConfigError(f"{option}: {part} was trained on {n} instances, expected {instances}")
        out.append(ckpt)
    return out


# ---------------------------------------------------------------------- evaluation
def evaluate_checkpoints(ckpts: Sequence[Path], seeds: int, jobs: int, progress: bool,
                         out_dir: Path, zoo: ZooRouter | None = None) -> list[dict[str, Any]]:
    """The three routers (and the zoo's, labelled ``zoo_rl``) and the automatic heuristics on the first router's
    training env, held-out seeds; writes evaluation.json / .md / .png to ``out_dir``; the per-policy summary."""
    env_cfg = read_env(ckpts[0])
    for c in ckpts[1:]:
        other = read_env(c)
        if {k: v for k, v in other.items() if k != "reward"} != {k: v for k, v in env_cfg.items() if k != "reward"}:
            raise ConfigError(f"{c} was trained on another env than {ckpts[0]}; evaluate runs of one setting")
    specs = [{"checkpoint": str(c), "label": v.label} for v, c in zip(VARIANTS, ckpts)]
    specs += [{"checkpoint": str(zoo.checkpoint), "label": ZOO_LABEL}] if zoo else []
    specs += baseline_specs("auto", str(env_cfg.get("id", "workload_router")))
    n = env_cfg.get("num_requests")
    _log(f"evaluating {len(specs)} policies x {seeds} held-out seeds ({n} requests) -> {out_dir}")
    summary = evaluate(env_cfg, specs, seeds, jobs, progress, out_dir, REFERENCE, config={
        "checkpoints": {v.label: str(c) for v, c in zip(VARIANTS, ckpts)}, "baselines": "auto"})
    for v, c in zip(VARIANTS, ckpts):  # how much training the numbers stand for
        entry = next(e for e in summary if e["policy"] == v.label)
        m = read_meta(c)
        entry["training_steps"], entry["checkpoint"] = m.get("steps"), str(c)
    return summary


# ---------------------------------------------------------------------- claims
def _by_policy(summary: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    by = {str(e["policy"]): e for e in summary}
    if REFERENCE not in by:
        raise ConfigError(f"the evaluation has no {REFERENCE} row: no gains")
    return by


def _best_heuristic(by: Mapping[str, Mapping[str, Any]]) -> tuple[str | None, float | None]:
    gains = [(by[h].get("e2e_gain_pct"), h) for h in PAPER_HEURISTICS if by.get(h, {}).get("e2e_gain_pct") is not None]
    if not gains:
        return None, None
    g, h = max(gains)
    return h, g


def _ranking(items: Sequence[tuple[str, float | None]], descending: bool, unit: str) -> str:
    """The measured order as text, e.g. ``Aware 5.10 % > Guided 4.00 % > Baseline 1.20 %``."""
    known = sorted(((round(v, 2), n) for n, v in items if v is not None), key=lambda t: t[0], reverse=descending)
    text = ""
    for i, (v, n) in enumerate(known):
        if i:
            text += " = " if v == known[i - 1][0] else (" > " if descending else " < ")
        text += f"{n} {v:.2f}{unit}"
    missing = [n for n, v in items if v is None]
    return text + (f" (unmeasured: {', '.join(missing)})" if missing else "")


def _gain_claims(by: Mapping[str, Mapping[str, Any]], common: dict[str, Any], eight: bool,
                 learned: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Each learned router's gain vs round robin, its note the variant's ``learned`` line when given (what its own
    run learned); when the zoo's router (``zoo_rl``) was evaluated, it is measured for every variant."""
    rows = []
    where = "8 instances" if eight else "4 instances"
    metrics = (("e2e_gain_pct", "mean E2E"),) if eight else (("e2e_gain_pct", "mean E2E"),
                                                              ("makespan_gain_pct", "time to finish"))
    for key, what in metrics:
        for v in VARIANTS:
            e = by.get(ZOO_LABEL if ZOO_LABEL in by else v.label, {})
            p = v.gain8_pct if eight else v.gain_pct
            steps = e.get("training_steps")
            note = f"best/ checkpoint from training step {steps:,}" if isinstance(steps, int) else ""
            if learned and v.name in learned:
                note = learned[v.name]
            if key == "makespan_gain_pct":
                note += "; the paper's 'E2E' read as the time to finish all requests (RR ~170 s implied)"
                note = note.lstrip("; ")
            rows.append(claim_row(PAPER, f"{v.name}: gain vs RR, {what} ({where})", p, e.get(key),
                                  gain_verdict(p, e.get(key), "at_least"), kind="at_least", unit="%",
                                  metric=key, policy=v.label, note=note, **common))
    return rows


def _heuristic_claims(by: Mapping[str, Mapping[str, Any]], common: dict[str, Any]) -> list[dict[str, Any]]:
    best, g = _best_heuristic(by)
    others = {k: e.get("e2e_gain_pct") for k, e in by.items()
              if k not in PAPER_HEURISTICS and k != REFERENCE and not k.endswith("_rl")}
    extra = ", ".join(f"{k} {x:+.2f} %" for k, x in others.items() if x is not None)
    ea = by.get("earliest_available", {}).get("e2e_gain_pct")
    return [
        claim_row(PAPER, "best paper heuristic: gain vs RR <= 2.6 %, mean E2E", BEST_HEURISTIC_PCT, g,
                  gain_verdict(BEST_HEURISTIC_PCT, g, "at_most"),
                  kind="at_most", unit="%", metric="e2e_gain_pct", policy=best,
                  note=f"best of {', '.join(PAPER_HEURISTICS)}: {best}"
                  + (f"; not the paper's: {extra}" if extra else ""),
                  **common),
        claim_row(PAPER, "earliest-available: gain vs RR, mean E2E", EARLIEST_AVAILABLE_PCT, ea,
                  gain_verdict(EARLIEST_AVAILABLE_PCT, ea, "about"), kind="about", unit="%", metric="e2e_gain_pct",
                  policy="earliest_available", **common),
    ]


def _order_claims(by: Mapping[str, Mapping[str, Any]], common: dict[str, Any]) -> list[dict[str, Any]]:
    short = {"baseline": "Baseline", "aware": "Aware", "guided": "Guided"}
    v = {x.key: x for x in VARIANTS}
    waits = [(short[k], by.get(v[k].label, {}).get("router_wait_s_mean")) for k in ("baseline", "guided", "aware")]
    paper_waits = " < ".join(f"{short[k]} {v[k].wait_s:.2f} s" for k in ("baseline", "guided", "aware"))
    best, g = _best_heuristic(by)
    gains = [(short[k], by.get(v[k].label, {}).get("e2e_gain_pct")) for k in ("guided", "aware", "baseline")]
    gains.append((f"best heuristic ({best})", g))
    paper_gains = " > ".join(f"{short[k]} {v[k].gain_pct:.2f} %" for k in ("guided", "aware", "baseline"))
    rows = []
    for claim, paper, items, desc, unit, metric in (
            ("router wait: Baseline < Guided < Aware", paper_waits, waits, False, " s", "router_wait_s_mean"),
            ("E2E gain: Guided > Aware > Baseline > heuristics", paper_gains + f" > heuristics "
             f"<= {BEST_HEURISTIC_PCT:.2f} %", gains, True, " %", "e2e_gain_pct")):
        vals = [x for _, x in items]
        good, total = pairs_in_order(vals, desc)
        rows.append(claim_row(PAPER, claim, paper, _ranking(items, desc, unit), order_verdict(vals, desc),
                              kind="order", metric=metric, note=f"{good} of {total} pairs in the claimed order",
                              **common))
    return rows


def claims(summary: Sequence[Mapping[str, Any]], setting: str = "full", note: str | None = None,
           summary8: Sequence[Mapping[str, Any]] | None = None,
           learned: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The headline claims from evaluation summaries (llmsim.agents.evaluate_report.summarise, with the learned
    routers labelled ``<key>_rl``); ``summary8`` adds the 8-instance claims; ``learned`` (a line per variant) says
    what each variant's own run learned (and, when the zoo's router ``zoo_rl`` was evaluated, that it is measured)."""
    by = _by_policy(summary)
    seeds = list(by[REFERENCE].get("seeds", []))
    common = {"seeds": seeds, "setting": setting, "setting_note": note}
    rows = _gain_claims(by, common, False, learned) + _heuristic_claims(by, common) + _order_claims(by, common)
    if summary8 is not None:
        by8 = _by_policy(summary8)
        common8 = {**common, "seeds": list(by8[REFERENCE].get("seeds", []))}
        rows += _gain_claims(by8, common8, True, learned)
    return rows


# ---------------------------------------------------------------------- the run
def _runs_note(ckpts: Sequence[Path], n_seeds: int) -> str:
    """What existing runs stand for, with a warning when they are not the paper's setting."""
    env = read_env(ckpts[0])
    steps = [read_meta(c).get("steps") or 0 for c in ckpts]
    preset = compose_experiment(f"{PRESET}_baseline" if env.get("num_instances", 4) == 4 else f"{PRESET}_8_baseline",
                                [])
    full_n, full_steps = preset["env"]["num_requests"], preset["trainer"]["total_steps"]
    text = (f"existing runs: {env.get('num_requests')} requests per episode, best/ checkpoints after "
            f"{', '.join(f'{s:,}' for s in steps)} steps; {n_seeds} held-out seed(s)")
    if env.get("num_requests") != full_n or min(steps) < full_steps:
        text += f" (NOT the full setting: {full_n:,} requests, {full_steps:,} steps)"
    return text


def _learned_lines(ckpts: Sequence[Path], summary: Sequence[Mapping[str, Any]], zoo: ZooRouter | None,
                   size: str) -> dict[str, str]:
    """One line per variant: what its own run learned, how its checkpoint did vs round robin, and what the
    claims measure (printed now, and carried by the rows)."""
    by = {str(e["policy"]): e for e in summary}
    versus = {v.name: versus_reference(by.get(v.label, {}).get("e2e_gain_pct"), REFERENCE) for v in VARIANTS}
    instead = instead_of(zoo, TESTBED) if size != "full" else "the claims measure these checkpoints"
    lines = policy_lines({v.name: c.parent for v, c in zip(VARIANTS, ckpts)}, instead, versus)
    for line in lines.values():
        _log(line)
    return lines


def run(quick: bool, out_dir: Path, jobs: int = 1, progress: bool = True,
        from_runs: str | Mapping[str, str] | None = None, seeds: int | None = None, scale8: bool = False,
        from_runs_8: str | Mapping[str, str] | None = None, size: str | None = None) -> list[dict[str, Any]]:
    """Train (unless ``from_runs``), evaluate and check the paper's claims; everything goes under ``out_dir``:
    train/ (run directories), evaluation.* and, for 8 instances, scale8/."""
    name, sz = pick(SIZES, quick, size)
    out_dir = Path(out_dir)
    n_seeds = seeds or sz.seeds
    ckpts = resolve_runs(from_runs, 4, "--from-runs") if from_runs else None
    ckpts8 = resolve_runs(from_runs_8, 8, "--from-runs-8") if from_runs_8 else None
    zoo, learned = None, {}
    if ckpts is None:
        if sz.note:
            _log(sz.note)
        ckpts = train_variants(name, sz, out_dir / "train", jobs, progress)
        setting, note = name, sz.note or None
        zoo = shipped(PAPER) if name != "full" else None  # quick / tiny: the routers above are smoke runs
    else:
        setting, note = "runs", _runs_note(ckpts, n_seeds)
        _log(note)
    summary = evaluate_checkpoints(ckpts, n_seeds, jobs, progress, out_dir, zoo)
    if setting != "runs":
        learned = _learned_lines(ckpts, summary, zoo, name)
    summary8 = None
    if ckpts8 is None and scale8:
        ckpts8 = train_variants(name, sz, out_dir / "scale8" / "train", jobs, progress, eight=True)
    if ckpts8 is not None:
        summary8 = evaluate_checkpoints(ckpts8, n_seeds, jobs, progress, out_dir / "scale8", zoo)
    rows = claims(summary, setting, note, summary8, learned)
    return [{**r, "out_dir": str(out_dir), **({"learned": list(learned.values())} if learned else {})} for r in rows]
