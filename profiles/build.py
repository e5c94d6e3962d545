"""Derive the committed profiles (profiles/data/<gpu>/<model>[-tpN].yaml) from ../shared/profiles_raw, or check them.

    python -m llmsim.profiles build [--raw DIR] [--only GPU[/MODEL]]          # check (default): compare, write nothing
    python -m llmsim.profiles build --write [--only GPU[/MODEL]]              # update profiles/data
    python -m llmsim.profiles build --out DIR                                 # write everything to another directory
    python -m llmsim.profiles build --from-raw MEASURED_DIR ... [--out DIR]   # from `python -m llmsim.profiles measure`

Check mode (the default) rebuilds in memory and compares with the committed files numerically
(llmsim.profiles.compare: same structure and strings, numbers within a relative 2e-3): exit 0 when they agree,
1 listing the files and keys that differ and by how much. ``--write`` writes the files that are missing or
differ beyond that tolerance (files that agree are left untouched). Any directory other than profiles/data
is written without ``--write``.

Deterministic: the same raw data gives byte-identical files on one machine (numbers rounded to 4 significant
digits, fixed key order, no timestamps). Sources, units and overlaps: docs/profiles.md
(and ../shared/specs/profiles_data.md).

What is built: llmsim.profiles.targets; how one profile is made (every part from the first provider in its
chain that has data for the (model, GPU, TP)): llmsim.profiles.document and profiles/providers/__init__.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llmsim.errors import ProfileError
from llmsim.perf.hardware import get_gpu
from llmsim.perf.models import get_model
from llmsim.perf.profile_table import profile_filename
from llmsim.profiles.compare import REL_TOL, compare_profile_texts
from llmsim.profiles.document import build_one, dump, render
from llmsim.profiles.estimate_check import add_expected_error
from llmsim.profiles.from_raw import build_from_raw
from llmsim.profiles.providers.raw import Raw
from llmsim.profiles.targets import DEFAULT_OUT, DEFAULT_RAW, all_targets, check_raw_dir, fits_gpu


# ------------------------------------------------------------------------------------------------- build
def build_texts(raw_dir: Path, only: str | None = None, verbose: bool = True) -> dict[str, tuple[str, str]]:
    """``{"<gpu>/<file>.yaml": (yaml text, provenance summary)}`` for every target that fits its GPU."""
    raw = Raw(raw_dir)
    out: dict[str, tuple[str, str]] = {}
    for model, gpu, tp in all_targets():
        if only and not (f"{gpu}/{model}".startswith(only) or gpu == only):
            continue
        if not fits_gpu(model, gpu, tp):
            if verbose:
                print(f"skip {model} on {gpu} tp{tp}: does not fit", file=sys.stderr)
            continue
        b = build_one(raw, model, gpu, tp)
        doc = render(b, model, gpu, tp)
        add_expected_error(doc, raw_dir, gpu, b.providers)
        out[f"{get_gpu(gpu).name}/{profile_filename(get_model(model).name, tp)}"] = (
            dump(doc), doc["provenance"]["summary"]
        )
    return out


def is_committed_dir(d: Path) -> bool:
    """Whether ``d`` is the committed profiles/data (written only with --write)."""
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
            "run `python -m llmsim.profiles build --write` to update them"
        )
        return 1
    print(f"{where}: all {n} profiles agree with a fresh build (rel {REL_TOL:g}); nothing written")
    return 0


def extra_files(texts: dict[str, tuple[str, str]], out_dir: Path) -> list[str]:
    """Committed profiles the build does not produce (e.g. from --from-raw): reported, not checked."""
    return sorted(
        str(p.relative_to(out_dir)) for p in out_dir.glob("*/*.yaml") if str(p.relative_to(out_dir)) not in texts
    )


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


# ------------------------------------------------------------------------------------------- the verb
def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``build`` verb's flags."""
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
        help="build from `python -m llmsim.profiles measure` output directories instead of profiles_raw",
    )
    ap.add_argument("-q", "--quiet", action="store_true")


def run(a: argparse.Namespace) -> int:
    """Check, write or build elsewhere (see the module); exit 0 agree / written, 1 differs, 2 bad input."""
    out = a.out if a.out is not None else Path(DEFAULT_OUT)
    try:
        if a.from_raw:
            return from_raw_main(a.from_raw, out, a.write)
        check_raw_dir(a.raw)
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
        print(f"{a.prog}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # not a command of its own: the room has one entry
    print(f"{__spec__.name} is not a command; run: python -m llmsim.profiles build --help", file=sys.stderr)
    raise SystemExit(2)
