"""Derive the committed profiles (profiles/data/<gpu>/<model>[-tpN].yaml) from ../shared/profiles_raw.

    python -m llmsim.profiles.build [--raw DIR] [--only GPU[/MODEL]]          # check (default): compare, write nothing
    python -m llmsim.profiles.build --write [--only GPU[/MODEL]]              # update profiles/data
    python -m llmsim.profiles.build --out DIR                                 # write everything to another directory
    python -m llmsim.profiles.build --from-raw PROFILER_DIR ... [--out DIR]   # build from llmsim.profiles.profile output

Check mode (the default) rebuilds in memory and compares with the committed files numerically
(llmsim.profiles.compare: same structure and strings, numbers within a relative 2e-3): exit 0 when they agree,
1 listing the files and keys that differ and by how much. ``--write`` writes the files that are missing or
differ beyond that tolerance (files that agree are left untouched). Any directory other than profiles/data
is written without ``--write``.

Deterministic: the same raw data gives byte-identical files on one machine (numbers rounded to 4 significant
digits, fixed key order, no timestamps). Sources, units and overlaps: shared/specs/profiles_data.md.

Every part of a profile (dense, lm_head, prefill/decode attention, CPU overhead, memory) comes from the
first provider in its chain that has data for the (model, GPU, TP): see profiles/providers/__init__.py.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from llmsim.errors import ProfileError, load_yaml_file
from llmsim.perf.hardware import get_gpu
from llmsim.perf.models import ModelSpec, get_model, register_model
from llmsim.perf.profile_table import FORMAT, profile_filename
from llmsim.profiles.compare import REL_TOL, compare_profile_texts
from llmsim.profiles.providers import CHAINS, Context, resolve
from llmsim.profiles.providers.fits import SEQ_GRID, TOKEN_GRID, lss_attention, lss_dense, lss_lm_head, monotone, sig
from llmsim.profiles.providers.memory import memory_values, reserved_bytes
from llmsim.profiles.providers.overhead import MODERN_OVERHEAD
from llmsim.profiles.providers.raw import SOURCES, Raw, lss_tables

REPO = Path(__file__).resolve().parent.parent
DEFAULT_RAW = REPO.parent / "shared" / "profiles_raw"
DEFAULT_OUT = REPO / "profiles" / "data"

MODELS_7B = [
    "llama-2-7b",
    "vicuna-7b",
    "llama-3-8b",
    "llama-3.1-8b",
    "mistral-7b",
    "qwen2.5-7b",
    "qwen2.5-3b",
    "opt-6.7b",
    "opt-1.3b",
    "opt-125m",
]
EXPERTS = ["alpaca-native", "chatglm-6b", "mpt-7b-instruct", "koala-7b", "baize-7b", "mpt-7b"]
BIG = ["llama-2-13b", "vicuna-13b", "opt-13b", "qwen2.5-14b"]
TARGETS: dict[str, list[str]] = {
    "a100-80gb": MODELS_7B + BIG + ["llama-2-70b", "llama-3-70b", "qwen2.5-72b"],
    "h100": MODELS_7B + BIG + ["llama-2-70b", "llama-3-70b", "qwen2.5-72b"],
    "rtx4090": MODELS_7B + EXPERTS,
    "rtx-pro-6000": ["llama-3.1-8b"],
    "v100-32gb": [
        "llama-2-7b",
        "vicuna-7b",
        "llama-2-13b",
        "opt-6.7b",
        "opt-1.3b",
        "opt-125m",
        "mistral-7b",
        "llama-3.1-8b",
    ],
    "v100-16gb": ["llama-2-7b", "vicuna-7b", "opt-6.7b", "opt-1.3b", "opt-125m"],
    "titan-rtx": ["opt-125m", "opt-1.3b", "opt-6.7b", "llama-2-7b"],
    "l40s": ["llama-2-7b", "llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "opt-6.7b", "llama-2-13b", "opt-13b"],
    "a40": ["llama-2-7b", "llama-2-13b", "opt-6.7b", "llama-3.1-8b"],
    "a100-40gb": ["llama-2-7b", "llama-3.1-8b", "mistral-7b", "opt-6.7b", "llama-2-13b", "opt-13b"],
    "a30": ["llama-2-7b", "llama-3.1-8b", "opt-6.7b", "opt-1.3b"],
    "a10": ["llama-2-7b", "llama-3.1-8b", "opt-6.7b", "opt-1.3b", "mistral-7b"],  # mistral-7b: QLM (spec 003)
}
TP_TARGETS = [
    ("llama-2-70b", "a100-80gb", 2),
    ("llama-2-70b", "a100-80gb", 4),
    ("llama-2-70b", "a100-80gb", 8),
    ("llama-2-70b", "h100", 2),
    ("llama-2-70b", "h100", 4),
    ("llama-2-70b", "h100", 8),
    ("llama-3-70b", "a100-80gb", 4),
    ("llama-2-13b", "a100-80gb", 2),
    ("vicuna-13b", "a10", 2),  # QLM's Vicuna-13B on A10s (spec 003): 26 GB of weights need two 24 GB GPUs
]
PART_NAMES = ("dense", "prefill_attention", "decode_attention", "lm_head", "overhead", "memory")
# The vidur CPU-overhead/sampler fit is computed for every profile (it was listed for every build so far).
BASE_SOURCES = frozenset({"vidur-history"})


@dataclass
class Part:
    status: str
    source: str


@dataclass
class Built:
    dense: list[float]
    lm_head: list[float]
    prefill: dict[str, float]
    decode: dict[str, float]
    overhead: dict[str, float]
    parts: dict[str, Part]
    sources: list[str]
    notes: list[str] = field(default_factory=list)
    memory: dict[str, int] = field(default_factory=dict)
    providers: dict[str, str] = field(default_factory=dict)  # part -> provider name (for the expected-error note)


# ------------------------------------------------------------------------------------------------- build
def build_one(raw: Raw, model: str, gpu: str, tp: int = 1, skip: tuple[str, ...] = ()) -> Built:
    """Resolve every part through its provider chain (providers named in ``skip`` are left out)."""
    ctx = Context(raw, get_model(model), gpu, get_gpu(gpu), tp)
    ctx.build_other = lambda other: build_one(raw, model, other, tp, skip)
    for part, chain in CHAINS.items():
        ctx.done[part] = resolve(chain, ctx, part, frozenset(skip))
    d = ctx.done
    sources = set(BASE_SOURCES).union(*(r.sources for r in d.values()))
    notes = list(dict.fromkeys(n for r in d.values() for n in r.notes))
    return Built(
        dense=d["dense"].value,
        lm_head=d["lm_head"].value,
        prefill=d["prefill_attention"].value,
        decode=d["decode_attention"].value,
        overhead=d["overhead"].value,
        parts={p: Part(r.status, r.source) for p, r in d.items()},
        sources=sorted(sources),
        notes=notes,
        memory=d["memory"].value,
        providers={p: r.provider for p, r in d.items()},
    )


def render(b: Built, model: str, gpu: str, tp: int) -> dict:
    m = get_model(model)
    parts = {k: {"status": b.parts[k].status, "source": b.parts[k].source} for k in PART_NAMES}
    srcs = []
    for s in b.sources:
        repo, commit, lic, sw = SOURCES[s]
        srcs.append({"repo": repo, "commit": commit, "license": lic, "software": sw})
    summary = ", ".join(f"{k}={v['status']}" for k, v in parts.items())
    return {
        "format": FORMAT,
        "model": m.name,
        "gpu": get_gpu(gpu).name,
        "tp": tp,
        "units": "seconds for the whole model on one TP shard; bytes",
        "dense": {"tokens": TOKEN_GRID, "seconds": monotone(b.dense)},
        "prefill_attention": {k: sig(b.prefill[k]) for k in ("fixed", "c2", "cp")},
        "decode_attention": {k: sig(b.decode[k]) for k in ("fixed", "per_seq", "per_ctx_token")},
        "lm_head": {"seqs": SEQ_GRID, "seconds": monotone(b.lm_head)},
        "overhead": {k: sig(b.overhead[k]) for k in ("per_iteration", "per_seq")},
        "memory": b.memory or memory_values(m, tp),
        "parts": parts,
        "provenance": {
            "summary": summary,
            "builder": "python -m llmsim.profiles.build (llmsim)",
            "sources": srcs,
            "notes": b.notes,
        },
    }


HEADER = "# Generated by `python -m llmsim.profiles.build`; do not edit. Derived data, see provenance.\n"


def dump(doc: dict) -> str:
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=110, default_flow_style=None)


def all_targets() -> list[tuple[str, str, int]]:
    out = [(mdl, gpu, 1) for gpu, mdls in TARGETS.items() for mdl in mdls]
    return out + TP_TARGETS


def build_texts(raw_dir: Path, only: str | None = None, verbose: bool = True) -> dict[str, tuple[str, str]]:
    """``{"<gpu>/<file>.yaml": (yaml text, provenance summary)}`` for every target that fits its GPU."""
    from llmsim.perf.profile import kv_capacity_from_bytes

    raw = Raw(raw_dir)
    out: dict[str, tuple[str, str]] = {}
    for model, gpu, tp in all_targets():
        if only and not (f"{gpu}/{model}".startswith(only) or gpu == only):
            continue
        m, g = get_model(model), get_gpu(gpu)
        try:
            kv_capacity_from_bytes(m.name, g, tp, 0.9, m.weight_bytes, m.kv_bytes_per_token, reserved_bytes(m, tp))
        except ValueError:
            if verbose:
                print(f"skip {model} on {gpu} tp{tp}: does not fit", file=sys.stderr)
            continue
        b = build_one(raw, model, gpu, tp)
        doc = render(b, model, gpu, tp)
        add_expected_error(doc, raw_dir, gpu, b.providers)
        out[f"{g.name}/{profile_filename(m.name, tp)}"] = (dump(doc), doc["provenance"]["summary"])
    return out


def add_expected_error(doc: dict, raw_dir: Path, gpu: str, providers: dict[str, str]) -> None:
    """State in an estimated profile the error its estimation method showed on GPUs with measurements
    (provenance.expected_error, from llmsim.profiles.estimate_check; VALIDATION.md section 9)."""
    from llmsim.profiles import estimate_check

    kind = estimate_check.estimate_kind(gpu, providers)
    if kind is not None:
        doc["provenance"]["expected_error"] = estimate_check.expected_error(raw_dir, kind)


def is_committed_dir(d: Path) -> bool:
    return d.resolve() == Path(DEFAULT_OUT).resolve()


def build_all(
    raw_dir: Path, out_dir: Path, only: str | None = None, verbose: bool = True, write_committed: bool = False
) -> list[Path]:
    """Build and write every target to ``out_dir`` (the committed directory only with ``write_committed``)."""
    if is_committed_dir(out_dir) and not write_committed:
        raise ProfileError(f"refusing to write the committed profiles in {out_dir} without write_committed=True")
    written = []
    for rel, (text, summary) in build_texts(raw_dir, only, verbose).items():
        p = out_dir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        written.append(p)
        if verbose:
            print(f"wrote {rel}  ({summary})")
    return written


# --------------------------------------------------------------------------------- check / write committed
def check_file(path: Path, text: str) -> list[str]:
    """Why ``path`` does not agree with the freshly built ``text`` (empty list: it agrees within tolerance)."""
    if not path.is_file():
        return ["missing"]
    return [str(x) for x in compare_profile_texts(path.read_text(), text)]


def sync_committed(texts: dict[str, tuple[str, str]], out_dir: Path, write: bool, verbose: bool = True) -> int:
    """Compare (and with ``write`` update) the files of ``out_dir``; exit status 0 when all agree afterwards."""
    bad: dict[str, list[str]] = {}
    for rel, (text, _) in texts.items():
        why = check_file(out_dir / rel, text)
        if not why:
            continue
        bad[rel] = why
        if write:
            (out_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (out_dir / rel).write_text(text)
        if verbose or not write:
            print(f"{'wrote' if write else 'DIFFERS'} {rel}: " + "; ".join(why[:5]) + (" ..." if len(why) > 5 else ""))
    n, where = len(texts), out_dir
    if write:
        print(f"{where}: wrote {len(bad)} of {n} profiles; {n - len(bad)} agree within rel {REL_TOL:g} (untouched)")
        return 0
    if bad:
        print(
            f"{len(bad)} of {n} profiles in {where} differ from a fresh build beyond rel {REL_TOL:g}; "
            "run `python -m llmsim.profiles.build --write` to update them"
        )
        return 1
    print(f"{where}: all {n} profiles agree with a fresh build (rel {REL_TOL:g}); nothing written")
    return 0


def extra_files(texts: dict[str, tuple[str, str]], out_dir: Path) -> list[str]:
    """Committed profiles the build does not produce (e.g. from --from-raw): reported, not checked."""
    return sorted(
        str(p.relative_to(out_dir)) for p in out_dir.glob("*/*.yaml") if str(p.relative_to(out_dir)) not in texts
    )


# ------------------------------------------------------------------------------------- profiler raw dirs
def read_meta(d: Path) -> dict:
    """meta.yaml of a ``llmsim.profiles.profile`` output directory, checked; errors are one-line ProfileErrors."""
    f = d / "meta.yaml"
    if not d.is_dir():
        raise ProfileError(f"--from-raw {d}: not a directory (expected the output of python -m llmsim.profiles.profile)")
    if not f.is_file():
        raise ProfileError(f"--from-raw {d}: meta.yaml is missing (expected the output of python -m llmsim.profiles.profile)")
    meta = load_yaml_file(f, ProfileError)
    if not isinstance(meta, dict):
        raise ProfileError(f"{f}: expected a mapping, got {type(meta).__name__}")
    for key in ("model", "gpu"):
        if not isinstance(meta.get(key), str) or not meta[key]:
            raise ProfileError(f"{f}: key {key!r} missing or not a string")
    tp = meta.get("tp", 1)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ProfileError(f"{f}: key 'tp': expected an integer >= 1, got {tp!r}")
    try:
        get_gpu(meta["gpu"])
    except ValueError as e:
        raise ProfileError(f"{f}: {e}") from None
    for name in ("dense.csv", "attention.csv", "per_sequence.csv"):
        if not (d / name).is_file():
            raise ProfileError(f"--from-raw {d}: {name} is missing")
    return meta


def raw_model(meta: dict, f: Path) -> ModelSpec:
    """The registry model named in meta.yaml, or one registered from its recorded shape (HF config models)."""
    try:
        return get_model(meta["model"])
    except ValueError:
        pass
    sh = meta.get("shape")
    need = ("n_layers", "hidden", "n_heads", "n_kv_heads", "intermediate", "vocab", "gated_mlp")
    if not isinstance(sh, dict) or any(k not in sh for k in need):
        raise ProfileError(f"{f}: unknown model {meta['model']!r} and no complete 'shape' ({', '.join(need)})")
    m = ModelSpec(
        meta["model"],
        sh["n_layers"],
        sh["hidden"],
        sh["n_heads"],
        sh["n_kv_heads"],
        sh["intermediate"],
        sh["vocab"],
        gated_mlp=sh["gated_mlp"],
        head_dim=sh.get("head_dim", 0),
        tied_embeddings=sh.get("tied_embeddings", False),
        max_position=sh.get("max_position", 4096),
    )
    register_model(m)
    return m


def build_from_raw(d: Path) -> tuple[dict, str, str, int]:
    """Build a profile from a ``llmsim.profiles.profile`` output directory (LLMServingSim-like CSVs + meta.yaml)."""
    meta = read_meta(d)
    m = raw_model(meta, d / "meta.yaml")
    try:
        gpu = get_gpu(meta["gpu"]).name
        tp = int(meta.get("tp", 1))
        dn, att, ps = lss_tables(d)
        dense = lss_dense(dn, m)
        prefill, decode = lss_attention(att, m.n_layers)
        lm_head = lss_lm_head(ps)
    except (ValueError, KeyError, AttributeError, IndexError, TypeError) as e:
        raise ProfileError(f"--from-raw {d}: cannot build a profile: {type(e).__name__}: {e}") from None
    src = f"llmsim.profiles.profile on {meta.get('device_name', '?')} ({meta.get('software', {})})"
    parts = {p: Part("measured", src) for p in ("dense", "prefill_attention", "decode_attention", "lm_head")}
    parts["overhead"] = Part("estimated", "framework overhead not measured by the operator profiler; vLLM V1 default")
    parts["memory"] = Part("estimated", "from the model config and the calibrated reserve")
    b = Built(dense, lm_head, prefill, decode, dict(MODERN_OVERHEAD), parts, [], [f"raw dir {d.name}"])
    doc = render(b, m.name, meta["gpu"], tp)
    doc["provenance"]["sources"] = [
        {"repo": "local measurement", "commit": "", "license": "user data", "software": str(meta.get("software", {}))}
    ]
    doc["provenance"]["hardware"] = meta.get("hardware", {})
    return doc, m.name, gpu, tp


def from_raw_main(dirs: list[Path], out: Path, write: bool) -> int:
    """--from-raw: write each profile to ``out`` (in the committed directory only with --write)."""
    status = 0
    for d in dirs:
        doc, model, gpu, tp = build_from_raw(d)
        p = out / gpu / profile_filename(model, tp)
        if is_committed_dir(out) and not write:
            why = check_file(p, dump(doc))
            if why:
                more = f" and {len(why) - 1} more" if len(why) > 1 else ""
                print(
                    f"not written: {p} ({why[0]}{more}); pass --write to write into the committed "
                    "profiles/data, or --out DIR"
                )
                status = 1
            else:
                print(f"{p} agrees with the build; nothing written")
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(dump(doc))
        print(f"wrote {p}")
    return status


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m llmsim.profiles.build", description=__doc__.split("\n")[0])
    ap.add_argument("--raw", type=Path, default=DEFAULT_RAW, help="profiles_raw directory (default: %(default)s)")
    ap.add_argument(
        "--out", type=Path, help="output directory (default: the committed profiles/data, checked unless --write)"
    )
    ap.add_argument("--write", action="store_true", help="write into the committed profiles/data (default: check)")
    ap.add_argument("--only", help="build only GPU or GPU/MODEL prefix")
    ap.add_argument(
        "--from-raw",
        type=Path,
        nargs="*",
        default=[],
        help="build from llmsim.profiles.profile output directories instead of profiles_raw",
    )
    ap.add_argument("-q", "--quiet", action="store_true")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    out = a.out if a.out is not None else Path(DEFAULT_OUT)
    try:
        if a.from_raw:
            return from_raw_main(a.from_raw, out, a.write)
        if not is_committed_dir(out):
            build_all(a.raw, out, a.only, verbose=not a.quiet)
            return 0
        texts = build_texts(a.raw, a.only, verbose=not a.quiet)
        status = sync_committed(texts, out, a.write, verbose=not a.quiet)
        extra = [] if a.only else extra_files(texts, out)
        if extra and not a.quiet:
            print(f"not produced by this build (not checked): {', '.join(extra)}")
        return status
    except ProfileError as e:
        print(f"python -m llmsim.profiles.build: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
