"""``python -m llmsim.compile {build,status,clean}``: the engine's compiled build (llmsim/compiled.py says how it is
used and when it is not)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from llmsim.compiled import (
    DEFAULT_DIR,
    MANIFEST,
    MODULES,
    PACKAGE_DIR,
    CompiledError,
    build_platform,
    in_use,
    package_sources,
    source_digest,
    stale_reason,
)

BUILD_TIMEOUT_S = 1800  # a few minutes on two slow cores; a compiler that hangs is an error, not a wait


def _copy_sources(dest: Path) -> None:
    for path in package_sources(PACKAGE_DIR):
        target = dest / "llmsim" / path.relative_to(PACKAGE_DIR)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def build(out: Path = DEFAULT_DIR, quiet: bool = True) -> Path:
    """Compile ``MODULES`` from a copy of the package's sources into ``out`` (replaced whole) and write its
    manifest. Needs mypy (the ``compiled`` extra) and a C compiler."""
    if importlib.util.find_spec("mypyc") is None:
        raise CompiledError('mypyc is not installed: pip install -e ".[compiled]" (it comes with mypy)')
    digest = source_digest()
    with tempfile.TemporaryDirectory(prefix="llmsim-compile-") as tmp:
        work = Path(tmp)
        _copy_sources(work)
        sources = [str(Path(*m.split(".")).with_suffix(".py")) for m in MODULES]
        cmd = [sys.executable, "-m", "mypyc", "--ignore-missing-imports", "--follow-imports=silent", *sources]
        try:
            done = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CompiledError(f"mypyc did not finish in {BUILD_TIMEOUT_S} s") from None
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
            raise CompiledError("mypyc failed: " + " | ".join(tail))
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="_compiled-", dir=out.parent))
        try:
            files = {}
            suffix = sysconfig.get_config_var("EXT_SUFFIX")
            for m in MODULES:
                # flat, named by the dotted module name: a folder named llmsim on sys.path would shadow the package
                built = Path(*m.split(".")).with_name(m.rsplit(".", 1)[1] + suffix)
                shutil.copyfile(work / built, staging / f"{m}{suffix}")
                files[m] = f"{m}{suffix}"
            for runtime in work.glob(f"*__mypyc{suffix}"):
                shutil.copyfile(runtime, staging / runtime.name)
            manifest = {"modules": list(MODULES), "files": files, "sources": digest, "platform": build_platform(),
                        "mypy": version("mypy")}
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
            if out.exists():
                shutil.rmtree(out)
            staging.rename(out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if not quiet:
        print(f"llmsim.compile: built {len(MODULES)} modules into {out} (used from the next process on)")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llmsim.compile", description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["build", "status", "clean"])
    ap.add_argument("--out", type=Path, default=DEFAULT_DIR, help="the build's folder (default: %(default)s)")
    args = ap.parse_args(argv)
    try:
        if args.command == "build":
            build(args.out, quiet=False)
        elif args.command == "clean":
            shutil.rmtree(args.out, ignore_errors=True)
            print(f"llmsim.compile: removed {args.out}")
        else:
            reason = stale_reason(args.out)
            running = in_use()
            print(f"llmsim.compile: {args.out}: {'up to date' if reason is None else reason}; this process runs "
                  f"{'the compiled engine from ' + str(running) if running else 'the Python engine'}")
    except (CompiledError, OSError) as e:
        print(f"python -m llmsim.compile: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
