"""The engine's hot modules compiled with mypyc: the same source, fewer CPU seconds per simulated request.

Optional. ``python -m llmsim.compile build`` (llmsim/compile.py; mypyc comes with ``pip install -e ".[compiled]"``)
compiles ``MODULES`` into ``llmsim/_compiled/`` beside a manifest of what it was built from. The Python source stays
the reference: the compiled modules give byte-identical results (tests/engine/test_compiled.py), and llmsim uses
them only while every source file of the package, the Python version and the platform still match the manifest. A
build that no longer matches is ignored with one warning naming the command that rebuilds or removes it, so an
edited engine never runs stale code. ``python -m llmsim.compile status`` says which engine runs.

This module imports nothing from llmsim (``llmsim/__init__.py`` calls ``activate`` before the engine is imported).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
import sysconfig
import warnings
from pathlib import Path

# the per-iteration and per-boundary code of one instance, the event loop, and the cluster's per-arrival and
# per-decision code: its routing, clock, outside driver, view and the public state's classes (docs/speed.md, "The
# engine compiled").
# A class that other code subclasses stays Python: mypyc refuses interpreted subclasses of compiled classes.
MODULES = (
    "llmsim.engine.cohort",
    "llmsim.engine.window_cohort",
    "llmsim.engine.fastpath",
    "llmsim.engine.instance",
    "llmsim.engine.iteration",
    "llmsim.event_loop",
    "llmsim.state.request_sums",
    "llmsim.state.cluster_state",
    "llmsim.cluster.live_requests",
    "llmsim.cluster.view",
    "llmsim.cluster.driver",
    "llmsim.cluster.clock",
    "llmsim.cluster.cluster",
)
PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_DIR = PACKAGE_DIR / "_compiled"
MANIFEST = "manifest.json"
BUILD_COMMAND = "python -m llmsim.compile build"


class CompiledError(Exception):
    """A build that cannot be made or read (one line for the command line)."""


def build_platform() -> dict[str, str]:
    return {"python": sys.version, "cache_tag": sys.implementation.cache_tag or "",
            "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX") or ""}


def package_sources(root: Path) -> list[Path]:
    """Every ``.py`` file of the simulator package (the layers above it, linked in as folders, are not llmsim's:
    the compiled code never reads their classes' layouts)."""
    files = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any((root / part).is_symlink() for part in rel.parts[:1]) or rel.parts[0] == DEFAULT_DIR.name:
            continue
        files.append(path)
    return files


def source_digest(root: Path = PACKAGE_DIR) -> str:
    """One hash of the package's sources: the compiled code inlines constants and class layouts of the modules it
    imports, so any edit to the package makes a build stale."""
    h = hashlib.sha256()
    for path in package_sources(root):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _read_manifest(build_dir: Path) -> dict | None:
    path = build_dir / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CompiledError(f"{path}: not a readable build manifest ({e}); run `{BUILD_COMMAND}` again") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise CompiledError(f"{path}: expected a mapping with 'files'; run `{BUILD_COMMAND}` again")
    return manifest


def stale_reason(build_dir: Path = DEFAULT_DIR) -> str | None:
    """Why the build in ``build_dir`` cannot be used (None: it can; a missing build is a reason too)."""
    manifest = _read_manifest(build_dir)
    if manifest is None:
        return "no build"
    if manifest.get("platform") != build_platform():
        return "built for another Python or platform"
    if manifest.get("modules") != list(MODULES):
        return "built for another list of modules"
    if manifest["files"] != {m: m + build_platform()["ext_suffix"] for m in MODULES}:
        return "its files are not the ones a build writes"  # (only the build's own names are ever loaded)
    if manifest.get("sources") != source_digest():
        return "the package's sources changed since the build"
    missing = [m for m, f in manifest["files"].items() if not (build_dir / f).is_file()]
    return f"missing compiled files of {', '.join(missing)}" if missing else None


class _CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the listed modules in the build and nothing else (every other name goes to the usual finders)."""

    def __init__(self, build_dir: Path, files: dict[str, Path]) -> None:
        self.build_dir = build_dir
        self.files = files

    def find_spec(self, name, path=None, target=None):
        file = self.files.get(name)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(
            name, file, loader=importlib.machinery.ExtensionFileLoader(name, str(file)))


def activate(build_dir: Path | None = None) -> bool:
    """Use the build in ``build_dir`` (default ``llmsim/_compiled``) for ``MODULES`` when it matches the sources.

    Called by ``llmsim/__init__.py`` before the engine is imported; a second call does nothing. A build that does not
    match gives one warning and the Python engine."""
    if in_use() is not None:
        return True
    build_dir = DEFAULT_DIR if build_dir is None else Path(build_dir)
    try:
        reason = stale_reason(build_dir)
    except CompiledError as e:
        reason = str(e)
    if reason is not None:
        if reason != "no build" and not _is_compile_command():
            warnings.warn(f"llmsim: the compiled engine in {build_dir} is not used ({reason}); the Python engine "
                          f"runs. Rebuild with `{BUILD_COMMAND}` or remove it with `python -m llmsim.compile "
                          "clean`", RuntimeWarning, stacklevel=2)
        return False
    if any(m in sys.modules for m in MODULES):
        return False  # the Python modules are already in use in this process
    manifest = _read_manifest(build_dir)
    assert manifest is not None
    sys.path.append(str(build_dir))  # mypyc's shared runtime module of the group
    sys.meta_path.insert(0, _CompiledFinder(build_dir, {m: build_dir / f for m, f in manifest["files"].items()}))
    return True


def _is_compile_command() -> bool:
    """Whether this process is ``python -m llmsim.compile ...``, which reports the build's state itself (a warning
    to run the command that is running would only confuse)."""
    argv = getattr(sys, "orig_argv", [])
    return any(a == "-m" and b == "llmsim.compile" for a, b in zip(argv, argv[1:])) or "-mllmsim.compile" in argv


def in_use() -> Path | None:
    """The build this process runs (None: the Python engine). Found by the finder's class name, so a copy of this
    module loaded from its file (how a test points a process at another build) is seen too."""
    for finder in sys.meta_path:
        if type(finder).__name__ == "_CompiledFinder":
            return finder.build_dir  # type: ignore[attr-defined]
    return None


def engine_name() -> str:
    """"compiled" or "python": which engine this process runs, as benchmarks and the CLI report it."""
    return "compiled" if in_use() is not None else "python"
