"""The router zoo: trained routers shipped with llmsim, one folder per testbed router, usable by name.

    zoo/<name>/manifest.json   what it is and how it was made (:data:`MANIFEST_KEYS`): the one-line retrain command,
                               its seed, steps, wall and CPU time measured, commit, date, env config digest, the
                               validation result that chose it and the summary of its unseen-suite evaluation
    zoo/<name>/checkpoint/     the checkpoint as llmsim-train writes it (checkpoint.json + weights, loaded
                               weights-only)
    zoo/<name>/export/         llmsim-export's policy.onnx + manifest.json (its sha256 is checked at every load)
    zoo/<name>/suite.json      its unseen-suite evaluation on test seeds, trimmed (per scenario stats, gains, verdicts)

``zoo:<name>`` works wherever a checkpoint directory or an export directory is accepted (llmsim-evaluate's
``checkpoints``, the onnx router's ``path``, the live router's ``policy.onnx``): docs/zoo.md. The folder lookup
itself is :func:`llmsim.envs.exported.resolve_zoo` (the envs layer needs it for exports); this module adds the
entries and their manifests.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmsim.envs.exported import ZOO_DIR, ZOO_PREFIX, resolve_zoo, zoo_dir, zoo_names
from llmsim.errors import ConfigError, load_json_file

__all__ = ["MANIFEST_KEYS", "ZOO_DIR", "ZOO_PREFIX", "ZooEntry", "checkpoint_dir", "entry", "missing_keys", "names"]

# what every zoo manifest records (tests/agents/test_zoo.py checks each shipped entry has them all)
MANIFEST_KEYS = ("name", "label", "testbed", "agent", "train_command", "train_seed", "steps", "wall_s", "cpu_s",
                 "commit", "date", "env_config_sha256", "validation", "suite", "notes")


@dataclass(frozen=True)
class ZooEntry:
    """One shipped router: its folder, the parts it ships and its manifest."""

    name: str
    testbed: str  # the env id it was trained on (workload_router, qos_edge, best_effort)
    dir: Path
    checkpoint_dir: Path
    export_dir: Path | None
    manifest: dict[str, Any]
    suite_json: Path | None


def names() -> list[str]:
    """The shipped routers, sorted, e.g. ``["best_effort", "qos_edge", "workload_router"]``."""
    return zoo_names()


def entry(name: str) -> ZooEntry:
    """The zoo router ``name`` (a bare name or ``zoo:<name>``); one ConfigError line listing the names otherwise."""
    name = name[len(ZOO_PREFIX):] if name.startswith(ZOO_PREFIX) else name
    d = zoo_dir(name)
    f = d / "manifest.json"
    manifest = load_json_file(f)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("testbed"), str):
        raise ConfigError(f"{f}: expected a JSON object with a 'testbed' (the env id)")
    export = d / "export"
    suite = d / "suite.json"
    return ZooEntry(name=name, testbed=manifest["testbed"], dir=d, checkpoint_dir=d / "checkpoint",
                    export_dir=export if export.is_dir() else None, manifest=manifest,
                    suite_json=suite if suite.is_file() else None)


def checkpoint_dir(path: str | Path) -> Path:
    """A checkpoint directory: ``zoo:<name>`` is that router's checkpoint/, anything else the path itself."""
    return resolve_zoo(path, "checkpoint")


def missing_keys(manifest: dict[str, Any]) -> list[str]:
    """The :data:`MANIFEST_KEYS` a zoo manifest lacks (or leaves null)."""
    return [k for k in MANIFEST_KEYS if manifest.get(k) is None]


# ---------------------------------------------------------------------- shipping a trained router
CHECKPOINT_FILES = ("checkpoint.json", "q_net.pt", "policy.pt", "config.yaml")  # not trainer.pt / replay: not needed
SUITE_KEYS = ("suite", "size", "testbed", "primary", "better", "slo_metric", "seeds", "seed_splits", "scenarios",
              "skipped", "incompatible", "policies", "learned", "heuristics", "results", "bars", "jobs", "wall_s")


def git_commit() -> str:
    """The commit of the source tree the router was trained from ("unknown" outside a checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def copy_checkpoint(src: Path, dest: Path) -> dict[str, Any]:
    """The files a router loads from (checkpoint.json + weights + its config) copied to ``dest``; its meta."""
    if not (src / "checkpoint.json").is_file():
        raise ConfigError(f"{src}: not a checkpoint directory (no checkpoint.json)")
    dest.mkdir(parents=True, exist_ok=True)
    for f in CHECKPOINT_FILES:
        if (src / f).is_file():
            shutil.copyfile(src / f, dest / f)
    return json.loads((dest / "checkpoint.json").read_text())


def validation_record(meta: dict[str, Any]) -> dict[str, Any]:
    """What chose the shipped checkpoint: the metric, its best score, the evaluation it came from and (a transfer
    policy) the fallback margins tried."""
    evals = meta.get("evaluations") or []
    keep = ("eval_metric", "best_score", "eval_seeds", "fallback_margin", "margin_table", "validation")
    return {**{k: meta[k] for k in keep if k in meta}, "evaluations": evals, "steps": meta.get("steps"),
            "updates": meta.get("updates")}


def ship(name: str, testbed: str, run_checkpoint: str | Path, train_command: str, steps: int, wall_s: float,
         cpu_s: float, notes: str = "", root: Path = ZOO_DIR) -> Path:
    """Put the checkpoint ``run_checkpoint`` (a training run's best/) into ``root``/<name>: its files, its ONNX
    export (llmsim-export, self-checked) and the manifest; the suite summary comes later (:func:`add_suite`)."""
    d = Path(root) / name
    meta = copy_checkpoint(Path(run_checkpoint), d / "checkpoint")
    em = export_entry(d)
    manifest = {"name": name, "label": meta.get("label") or name, "testbed": testbed, "agent": meta.get("agent"),
                "train_command": train_command, "train_seed": meta.get("seed"), "steps": int(steps),
                "best_at_step": meta.get("steps"),
                "wall_s": round(float(wall_s), 1), "cpu_s": round(float(cpu_s), 1), "commit": git_commit(),
                "date": time.strftime("%Y-%m-%d", time.gmtime()), "env_config_sha256": em.get("config_sha256"),
                "validation": validation_record(meta), "suite": {}, "notes": notes}
    (d / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str) + "\n")
    return d


def export_entry(d: Path, env_overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """(Re-)export the checkpoint of zoo entry ``d`` into ``d``/export (llmsim-export, self-checked); its manifest.
    ``env_overrides`` (llmsim-export's): recorded in the entry's manifest, so that the next export uses them too."""
    from llmsim.agents.export import export  # optional: torch and onnx (the rl / export extras)

    mf = d / "manifest.json"
    entry_manifest = json.loads(mf.read_text()) if mf.is_file() else None
    if env_overrides is None and entry_manifest is not None:
        env_overrides = entry_manifest.get("export_env_overrides")
    out = export(d / "checkpoint", out=d / "export", overwrite=True, env_overrides=env_overrides)
    if entry_manifest is not None and env_overrides:
        mf.write_text(json.dumps({**entry_manifest, "export_env_overrides": env_overrides}, indent=1,
                                 default=str) + "\n")
    em = json.loads((out / "manifest.json").read_text())
    em["checkpoint"] = "../checkpoint"  # the zoo's own copy (relative: no directory outside the repository)
    (out / "manifest.json").write_text(json.dumps(em, indent=1, default=str) + "\n")
    return em


def rounded(x: Any, digits: int = 5) -> Any:
    """``x`` with every float to ``digits`` significant digits (a zoo file stays small and diffable)."""
    if isinstance(x, float):
        return float(f"{x:.{digits}g}")
    if isinstance(x, dict):
        return {k: rounded(v, digits) for k, v in x.items()}
    if isinstance(x, list):
        return [rounded(v, digits) for v in x]
    return x


def trim_result(res: dict[str, Any], keep: set[str], primary: str) -> dict[str, Any]:
    """One scenario's result: every statistic and gain of the ``keep`` policies (the learned ones and the
    reference), the primary metric only of the other heuristics."""
    stats = {p: (s if p in keep else {primary: s.get(primary)}) for p, s in res.get("stats", {}).items()}
    gains = {p: (g if p in keep else {primary: g.get(primary)}) for p, g in res.get("gains", {}).items()}
    return {**res, "stats": stats, "gains": gains}


def trim_suite(body: dict[str, Any], name: str) -> dict[str, Any]:
    """suite.json without the rows and the config, the heuristics' secondary statistics or the local path of the
    checkpoint (named by its zoo name instead)."""
    out = {k: body[k] for k in SUITE_KEYS if k in body}
    learned, primary = set(body.get("learned", [])), str(body.get("primary"))
    out["results"] = {s: trim_result(r, learned | {r.get("reference")}, primary)
                      for s, r in body.get("results", {}).items()}
    text = json.dumps(rounded(out), default=str)
    for p in body.get("policies", []):  # the checkpoint's local path (in policies, incompatible's keys and lines)
        if p.get("kind") == "checkpoint" and p.get("path"):
            text = text.replace(json.dumps(str(p["path"]))[1:-1], f"{ZOO_PREFIX}{name}")
    return json.loads(text)


def suite_summary(body: dict[str, Any]) -> dict[str, Any]:
    """Per learned policy: each bar's verdict; and the size, seeds and scenario count of the run."""
    bars = {p: [{k: v for k, v in b.items() if k != "gains"} for b in verdicts]
            for p, verdicts in body.get("bars", {}).items()}
    return {"size": body.get("size"), "seeds": body.get("seeds"), "scenarios": len(body.get("results", {})),
            "bars": bars, "results_page": "docs/results/unseen_suite.md"}


def add_suite(name: str, suite_dir: str | Path, command: str, root: Path = ZOO_DIR) -> Path:
    """Attach an unseen-suite run (llmsim-evaluate suite=unseen's output directory) to ``root``/<name>."""
    d = Path(root) / name
    body = json.loads((Path(suite_dir) / "suite.json").read_text())
    (d / "suite.json").write_text(json.dumps({**trim_suite(body, name), "command": command}, indent=1,
                                             default=str) + "\n")
    manifest = {**json.loads((d / "manifest.json").read_text()), "suite": {**suite_summary(body), "command": command}}
    (d / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str) + "\n")
    return d


def main(argv: list[str] | None = None) -> None:
    """``python -m llmsim.agents.zoo ship NAME TESTBED RUN/best --command ... --steps N --wall-s S --cpu-s S``,
    ``... suite NAME SUITE_DIR --command ...`` (how the zoo's routers were put there; docs/zoo.md) or ``... export
    NAME`` (the shipped checkpoint exported again, after a change of the export format)."""
    ap = argparse.ArgumentParser(prog="python -m llmsim.agents.zoo")
    sub = ap.add_subparsers(dest="verb", required=True)
    s = sub.add_parser("ship")
    s.add_argument("name"), s.add_argument("testbed"), s.add_argument("checkpoint")
    s.add_argument("--command", required=True), s.add_argument("--steps", type=int, required=True)
    s.add_argument("--wall-s", type=float, required=True)
    s.add_argument("--cpu-s", type=float, required=True), s.add_argument("--notes", default="")
    u = sub.add_parser("suite")
    u.add_argument("name"), u.add_argument("suite_dir"), u.add_argument("--command", required=True)
    x = sub.add_parser("export")
    x.add_argument("name"), x.add_argument("--env-overrides", type=json.loads, default=None,
                                           help='llmsim-export\'s env_overrides as JSON, e.g. \'{"experts": 10}\'')
    a = ap.parse_args(argv)
    try:
        if a.verb == "ship":
            d = ship(a.name, a.testbed, a.checkpoint, a.command, a.steps, a.wall_s, a.cpu_s, a.notes)
        elif a.verb == "suite":
            d = add_suite(a.name, a.suite_dir, a.command)
        else:
            d = entry(a.name).dir
            export_entry(d, a.env_overrides)
    except ConfigError as err:
        raise SystemExit(f"zoo: {err}") from None
    print(f"zoo:{a.name}: {d}")


if __name__ == "__main__":
    main()
