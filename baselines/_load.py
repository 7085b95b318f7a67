"""Import a framework's unmodified kernel modules, from the offline pack or an installed framework.

The pack (`python -m baselines.pack`, folder `$ONELA_BASELINE_PACK`, default `<repo>/.baseline_pack`) holds
the frameworks' kernel modules without their compiled extensions or pins. Loading goes first through the pack
when it exists, else through whatever framework is installed. Either way the loader only
  - registers the PACK_SPEC's `stub_packages` as empty packages (their `__init__` files are registries and
    re-exports that import the whole serving stack, not kernels),
  - registers its `extension_stubs` (compiled extensions that platform code imports but the kernels never
    call) as empty modules,
  - registers its `placeholders` (third-party modules imported by utility code at module level) as modules
    that raise ImportError on first use, only when the host lacks them and only while the framework's modules
    import,
and never touches a kernel module. `load()` returns the imported module; `unavailable_reason()` is what an
adapter's `supports()` reports when that fails.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from pathlib import Path

PACK_ENV = "ONELA_BASELINE_PACK"
REPO_ROOT = Path(__file__).resolve().parent.parent
_failures: dict[tuple[str, str], str] = {}


def pack_dir() -> Path:
    return Path(os.environ.get(PACK_ENV) or REPO_ROOT / ".baseline_pack")


def pack_site() -> Path | None:
    """The pack's import root, if a pack has been built."""
    site = pack_dir() / "site"
    return site if (pack_dir() / "MANIFEST.json").is_file() and site.is_dir() else None


def pack_label() -> str:
    """The pack as a row's reason names it: by what it holds (each framework's name==version, from its
    manifest), never by where it lies, so that a table's reasons read the same on every host."""
    import json
    try:
        manifest = json.loads((pack_dir() / "MANIFEST.json").read_text())
        held = [f["requirement"] for f in manifest.get("frameworks", [])]
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return "the baseline pack (its MANIFEST.json unreadable)"
    return f"the baseline pack ({', '.join(held) or 'no framework'})"


def _without_pack_dir(text: str) -> str:
    """`text` with the pack folder's path (e.g. in an import error's file name) written as <pack>."""
    return text.replace(str(pack_dir().resolve()), "<pack>").replace(str(pack_dir()), "<pack>")


class MissingDependency(types.ModuleType):
    """Stands in for an absent third-party module that only non-kernel code imports. Import statements and
    attribute look-ups succeed (so `from PIL import Image` at module level still imports); calling anything
    raises ImportError naming the missing module."""

    def __init__(self, name: str, framework: str = ""):
        super().__init__(name)
        self.__spec__ = importlib.machinery.ModuleSpec(name, _PLACEHOLDERS, is_package=True)
        self.__path__ = []
        self._onela_framework = framework

    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        child = MissingDependency(f"{self.__name__}.{attr}", self._onela_framework)
        object.__setattr__(self, attr, child)
        return child

    def __call__(self, *args, **kwargs):
        raise ImportError(f"{self.__name__} is not installed: the baseline loader put a placeholder for it because "
                          f"{self._onela_framework}'s PACK_SPEC lists it as used only outside the kernels, but "
                          f"this code path calls it")

    def __mro_entries__(self, bases):
        return (object,)


class _PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves `root.sub` for every placeholder root, so `from root.sub import x` imports too."""

    roots: dict[str, str] = {}

    def find_spec(self, fullname, path=None, target=None):
        root = fullname.split(".")[0]
        if root in self.roots and fullname != root:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return MissingDependency(spec.name, self.roots[spec.name.split(".")[0]])

    def exec_module(self, module):
        pass


_PLACEHOLDERS = _PlaceholderFinder()


def _find_package_dir(name: str) -> list[str]:
    """Directories of package `name` on the current path, without running any __init__."""
    parent, _, last = name.rpartition(".")
    roots = sys.modules[parent].__path__ if parent else sys.path
    return [str(Path(r) / last) for r in roots if (Path(r) / last).is_dir()]


def _register_empty_package(name: str) -> None:
    if name in sys.modules:
        return
    dirs = _find_package_dir(name)
    if not dirs:
        where = pack_label() if pack_site() else "a baseline pack: none built"
        raise ImportError(f"package {name} not found (not in {where}, and not installed)")
    mod = types.ModuleType(name)
    mod.__path__ = dirs
    mod.__package__ = name
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    mod.__spec__.submodule_search_locations = dirs
    mod.__file__ = None
    sys.modules[name] = mod
    parent, _, last = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], last, mod)


def _prepare(spec: dict) -> None:
    site = pack_site()
    if site is not None and str(site) not in sys.path:
        sys.path.insert(0, str(site))
    framework = spec["wheel"]
    for name in spec.get("placeholders", []):
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            _PlaceholderFinder.roots[name] = framework
            sys.modules[name] = MissingDependency(name, framework)
            if _PLACEHOLDERS not in sys.meta_path:
                sys.meta_path.append(_PLACEHOLDERS)
    for name in sorted(spec.get("stub_packages", []), key=lambda n: n.count(".")):
        parts = name.split(".")
        for i in range(1, len(parts)):       # parents of a stub: import them for real (they are not stubbed)
            parent = ".".join(parts[:i])
            if parent not in sys.modules and parent not in spec["stub_packages"]:
                importlib.import_module(parent)
        _register_empty_package(name)
    for name in spec.get("extension_stubs", []):
        if name not in sys.modules:
            sys.modules[name] = types.ModuleType(name)


def load(spec: dict, module: str) -> types.ModuleType:
    """Import `module` of the framework `spec` describes (raises ImportError with the reason)."""
    key = (spec["wheel"], module)
    if key in _failures:
        raise ImportError(_failures[key])
    try:
        _prepare(spec)
        return importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any import-time failure makes the framework unavailable
        where = pack_label() if pack_site() else "installed packages (no baseline pack built)"
        _failures[key] = f"{spec['wheel']}: cannot import {module} from {where}: {type(e).__name__}: " \
                         f"{_without_pack_dir(str(e))}"
        raise ImportError(_failures[key]) from e
    finally:
        _withdraw_placeholders()


def _withdraw_placeholders() -> None:
    """Placeholders serve the framework's own module-level imports only: once those ran (the modules keep their
    references), the names leave sys.modules, so that code elsewhere in the process sees the host as it is --
    transformers, for one, takes a module found under `torchcodec` for an installed package and then fails on
    its missing metadata."""
    for name in [n for n, m in sys.modules.items() if isinstance(m, MissingDependency)]:
        del sys.modules[name]
    _PlaceholderFinder.roots.clear()


def unavailable_reason(spec: dict, modules: list[str]) -> str | None:
    """None if every module loads, else why not (what supports() reports)."""
    for m in modules:
        try:
            load(spec, m)
        except ImportError as e:
            return str(e)
    return None
