"""Build the offline baseline pack: the frameworks' kernel modules, from their official wheels, without pins.

    python -m baselines.pack --wheels .whl --out .baseline_pack      # from wheels already in .whl/
    python -m baselines.pack --download [--dry-run]                   # networked: fetch the pinned wheels first

vLLM and SGLang pin exact torch releases and ship compiled extensions that will not load next to another
torch; their GDN kernels are plain Python + Triton. This command copies, byte for byte, only the Python
modules those kernels import (and the package metadata and licence files beside them) out of the downloaded
wheels into `<out>/site`, an import root the adapters put first on `sys.path` (`baselines._load`). Nothing
is edited; `<out>/MANIFEST.json` records each wheel's sha256 and every file taken.

PACK_SPEC: each adapter module `baselines/<name>.py` defines a module-level literal dict (read here with
`ast.literal_eval`, never by importing the adapter):

    PACK_SPEC = {
        "wheel": "vllm==0.33.0",          # dist==version of the official wheel to take modules from
        "modules": ["vllm.third_party.flash_linear_attention.ops.fused_recurrent", ...],
                                          # roots: the modules the adapter imports, plus any imported by a
                                          # name string (e.g. a platform class resolved by qualname)
        "follow_lazy": ["vllm.third_party.flash_linear_attention"],
                                          # module prefixes whose function-level imports are followed too
                                          # (the kernels' own lazy imports); elsewhere only module-level ones
        "stub_packages": ["vllm.third_party.flash_linear_attention.ops"],
                                          # packages whose __init__ is neither packed nor run: the loader
                                          # registers them as empty packages (registries, re-exports)
        "extension_stubs": ["vllm._C_stable_libtorch"],
                                          # compiled extensions imported by platform code, registered empty
        "placeholders": ["psutil", ...],  # third-party modules that utility code imports at module level but
                                          # the kernels never use; if absent on the host, the loader
                                          # registers a module that raises ImportError on first attribute use
        "deps": ["packaging==26.4"],      # small third-party wheels the closure needs at import time and a
                                          # bare GPU host may lack; extracted whole (a binary one, such as
                                          # msgspec, must match the GPU host's Python: --python-tag)
    }

The framework wheel contributes Python files only: its compiled extensions, built against the torch it
pins, are never packed. The closure follows `import` statements (not those under `if TYPE_CHECKING:`) from the roots through every
module found in the spec's wheels; parent packages' `__init__` files come along unless stubbed. Imports the
wheels cannot satisfy are listed in the manifest as `external` (the host must have them, or they are
placeholders). Several specs naming one wheel are merged (union of every list).
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import shutil
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

SPEC_KEYS = {"wheel", "modules", "follow_lazy", "stub_packages", "extension_stubs", "placeholders", "deps"}
LIST_KEYS = SPEC_KEYS - {"wheel"}
BASELINES_DIR = Path(__file__).resolve().parent
MANIFEST = "MANIFEST.json"
SITE = "site"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def parse_requirement(req: str) -> tuple[str, str]:
    """'vllm==0.33.0' -> ('vllm', '0.33.0'); only exact pins are allowed (a pack is reproducible)."""
    m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.+!_-]+)\s*", req or "")
    if not m:
        raise ValueError(f"wheel requirement must be 'name==version', got {req!r}")
    return m.group(1), m.group(2)


def validate_spec(spec, where: str) -> dict:
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: PACK_SPEC must be a dict, got {type(spec).__name__}")
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise ValueError(f"{where}: PACK_SPEC has unknown keys {sorted(unknown)}; allowed: {sorted(SPEC_KEYS)}")
    parse_requirement(spec.get("wheel"))
    for key in LIST_KEYS:
        val = spec.get(key, [])
        if not isinstance(val, list) or not all(isinstance(x, str) and x for x in val):
            raise ValueError(f"{where}: PACK_SPEC[{key!r}] must be a list of non-empty strings, got {val!r}")
    if not spec.get("modules"):
        raise ValueError(f"{where}: PACK_SPEC['modules'] is empty")
    for dep in spec.get("deps", []):
        parse_requirement(dep)
    return spec


def read_pack_spec(path: Path) -> dict | None:
    """The literal PACK_SPEC of one adapter file, or None if it defines none."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PACK_SPEC"
                                                for t in node.targets):
            try:
                spec = ast.literal_eval(node.value)
            except ValueError as e:
                raise ValueError(f"{path}: PACK_SPEC must be a literal dict ({e})") from None
            return validate_spec(spec, str(path))
    return None


def collect_specs(baselines_dir: Path = BASELINES_DIR) -> dict[str, dict]:
    """PACK_SPEC of every adapter module in `baselines_dir`, merged per wheel: {requirement: spec}."""
    merged: dict[str, dict] = {}
    for path in sorted(baselines_dir.glob("*.py")):
        if path.name.startswith("_") or path.name == "pack.py":
            continue
        spec = read_pack_spec(path)
        if spec is None:
            continue
        dist, ver = parse_requirement(spec["wheel"])
        key = f"{_norm(dist)}=={ver}"
        into = merged.setdefault(key, {"wheel": spec["wheel"], **{k: [] for k in LIST_KEYS}, "adapters": []})
        for k in LIST_KEYS:
            into[k] += [x for x in spec.get(k, []) if x not in into[k]]
        into["adapters"].append(path.stem)
    return merged


def find_wheel(wheels_dir: Path, requirement: str, python_tag: str = "cp312") -> Path:
    """The downloaded wheel file for 'name==version' (any build; one matching `python_tag` preferred)."""
    dist, ver = parse_requirement(requirement)
    found = []
    for p in sorted(wheels_dir.glob("*.whl")):
        parts = p.name[:-4].split("-")
        if len(parts) >= 5 and _norm(parts[0]) == _norm(dist) and parts[1] == ver:
            found.append(p)
    if not found:
        raise FileNotFoundError(
            f"no wheel for {requirement} in {wheels_dir}; download it with: python3 -m pip download --no-deps "
            f"--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 "
            f"--platform manylinux_2_34_x86_64 -d {wheels_dir} {requirement}")
    found.sort(key=lambda p: (python_tag not in p.name and "abi3" not in p.name and "py3-none" not in p.name,
                              p.name))
    return found[0]


@dataclass
class WheelFiles:
    """The importable Python files of a set of wheels: module name -> (wheel, member path)."""

    modules: dict[str, tuple[Path, str]] = field(default_factory=dict)
    packages: set[str] = field(default_factory=set)       # regular packages (have __init__.py)
    namespaces: set[str] = field(default_factory=set)     # directories holding modules without __init__.py
    binary: set[str] = field(default_factory=set)         # compiled extension modules (never parsed)
    _zips: dict = field(default_factory=dict)

    def add(self, wheel: Path) -> None:
        z = self._zips[wheel] = zipfile.ZipFile(wheel)     # kept open: a wheel is read many times
        for member in z.namelist():
            top = member.split("/", 1)[0]
            if top.endswith((".dist-info", ".data")):
                continue
            if re.search(r"\.(abi3|cpython-[^/]*)\.so$|\.pyd$", member):
                parts = member.split("/")
                parts[-1] = parts[-1].split(".", 1)[0]
                if all(p.isidentifier() for p in parts):
                    self.binary.add(".".join(parts))
                    for i in range(1, len(parts)):
                        self.namespaces.add(".".join(parts[:i]))
                continue
            if not member.endswith(".py"):
                continue
            parts = member[:-3].split("/")
            if not all(p.isidentifier() for p in parts):
                continue
            if parts[-1] == "__init__":
                name = ".".join(parts[:-1])
                self.packages.add(name)
            else:
                name = ".".join(parts)
            self.modules[name] = (wheel, member)
            for i in range(1, len(parts)):
                self.namespaces.add(".".join(parts[:i]))
        self.namespaces -= self.packages | set(self.modules)

    def is_package(self, name: str) -> bool:
        return name in self.packages or name in self.namespaces

    def exists(self, name: str) -> bool:
        return name in self.modules or name in self.namespaces or name in self.binary

    def source(self, name: str) -> str:
        wheel, member = self.modules[name]
        return self._zips[wheel].read(member).decode("utf-8")

    def read(self, wheel: Path, member: str) -> bytes:
        return self._zips[wheel].read(member)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_names(source: str, module: str, is_package: bool, lazy: bool) -> list[tuple[str, bool]]:
    """(absolute name, must_be_module) for each name a module's import statements mention; a `from X import
    a` target `X.a` may be a submodule or just an attribute of X (must_be_module False)."""
    out: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.orelse:
                    visit_stmt(sub, in_function)
                continue
            visit_stmt(child, in_function)

    def visit_stmt(child: ast.AST, in_function: bool) -> None:
        fn = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        take = lazy or not in_function
        if isinstance(child, ast.Import) and take:
            out.extend((a.name, True) for a in child.names)
        elif isinstance(child, ast.ImportFrom) and take:
            if child.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - (child.level - 1)]
                parent = ".".join(base + ([child.module] if child.module else []))
            else:
                parent = child.module
            out.append((parent, True))
            out.extend((f"{parent}.{a.name}", False) for a in child.names if a.name != "*")
        visit(child, fn)

    visit(ast.parse(source), False)
    return out


def closure(files: WheelFiles, spec: dict) -> tuple[set[str], set[str], set[str]]:
    """(modules to pack, stubbed packages met, external module names) for a merged spec."""
    stubs = set(spec["stub_packages"]) | set(spec["extension_stubs"])
    lazy_prefixes = tuple(spec["follow_lazy"])
    todo = list(spec["modules"])
    missing = [m for m in todo if not files.exists(m)]
    if missing:
        raise ValueError(f"{spec['wheel']}: PACK_SPEC modules not in the wheel(s): {missing}")
    seen: set[str] = set()
    met_stubs: set[str] = set()
    external: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        if name in stubs:
            if name in spec["stub_packages"]:
                met_stubs.add(name)
            continue
        if name not in files.modules:       # namespace package: nothing to parse
            continue
        lazy = any(name == p or name.startswith(p + ".") for p in lazy_prefixes)
        for cand, must_be_module in imported_names(files.source(name), name, files.is_package(name), lazy):
            if files.exists(cand) or cand in stubs:
                todo.append(cand)
            elif must_be_module:
                top = cand.split(".")[0]
                if top not in sys.stdlib_module_names:
                    external.add(cand if files.exists(top) else top)
    packed = {m for m in seen if m in files.modules and m not in stubs}
    return packed, met_stubs, external


def _dist_info_files(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return [n for n in z.namelist() if re.match(r"[^/]+\.dist-info/(METADATA|licenses/.+|LICEN[SC]E.*)$", n) and not n.endswith("/")]


def _licence_files(wheel: Path, dirs: set[str]) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return [n for n in z.namelist()
                if "/" in n and n.rsplit("/", 1)[0] in dirs and re.match(r"(LICEN[SC]E|COPYING)", n.rsplit("/", 1)[1])]


def _whole_wheel(wheel: Path) -> list[str]:
    """Every importable file of a dependency wheel (its dist-info reduced to METADATA and licences)."""
    with zipfile.ZipFile(wheel) as z:
        return [n for n in z.namelist() if not n.endswith("/")
                and not n.split("/", 1)[0].endswith((".dist-info", ".data"))] + _dist_info_files(wheel)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def build_pack(wheels_dir: Path, out_dir: Path, specs: dict[str, dict], python_tag: str = "cp312") -> dict:
    """Extract every spec's module closure from its wheels into out_dir/site; returns the manifest."""
    wheels_dir, out_dir = Path(wheels_dir), Path(out_dir)
    if not wheels_dir.is_dir():
        raise ValueError(f"--wheels {wheels_dir} is not a directory")
    if out_dir.exists() and not (out_dir / MANIFEST).exists() and any(out_dir.iterdir()):
        raise ValueError(f"--out {out_dir} exists, is not empty and holds no {MANIFEST}; refusing to replace it")
    final_dir, out_dir = out_dir, out_dir.with_name(out_dir.name + ".partial")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    site = out_dir / SITE
    site.mkdir(parents=True)
    manifest = {"built_by": "python -m baselines.pack", "python_tag": python_tag, "frameworks": []}
    written: set[str] = set()
    for key, spec in sorted(specs.items()):
        wheels = [find_wheel(wheels_dir, spec["wheel"], python_tag)]
        wheels += [find_wheel(wheels_dir, d, python_tag) for d in spec["deps"]]
        files = WheelFiles()
        for w in wheels:
            files.add(w)
        packed, met_stubs, external = closure(files, spec)
        members: list[tuple[Path, str]] = [files.modules[m] for m in sorted(packed) if files.modules[m][0] == wheels[0]]
        for w in wheels[1:]:
            members += [(w, n) for n in _whole_wheel(w)]
        for w in wheels[:1]:
            dirs = {files.modules[m][1].rsplit("/", 1)[0] for m in packed if files.modules[m][0] == w}
            members += [(w, n) for n in _dist_info_files(w) + _licence_files(w, dirs)]
        for wheel, member in members:
            if member in written:
                continue
            dest = site / member
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(files.read(wheel, member))
            written.add(member)
        manifest["frameworks"].append({
            "requirement": spec["wheel"], "adapters": spec.get("adapters", []),
            "wheels": [{"file": w.name, "sha256": _sha256(w)} for w in wheels],
            "modules": sorted(packed), "stubbed_packages": sorted(met_stubs),
            "extension_stubs": spec["extension_stubs"], "placeholders": spec["placeholders"],
            "external": sorted(external),
        })
    manifest["files"] = len(written)
    manifest["bytes"] = sum((site / m).stat().st_size for m in written)
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    if final_dir.exists():
        shutil.rmtree(final_dir)
    out_dir.rename(final_dir)       # a failed build never leaves a half pack where the loader looks
    return manifest


# ---------------------------------------------------------------- the networked set-up (./run_all.sh)
# On a host that reaches the package index, `--download` fetches the pinned wheels every PACK_SPEC names (the
# framework wheels and their small deps, for this interpreter's Python), checks each against the sha256 the
# committed results' env records hold for a file of that name, then builds the pack; `--install-dsl` does the
# same for FlashInfer's CuTe DSL (the adapters' SHIP_WHEELS) and pip-installs it into this interpreter, as
# `ship_parts.py receive --install` does on an air-gapped host. `--dry-run` resolves the wheels on the index
# (metadata only), compares their sha256 with the records and prints the plan: no wheel is downloaded.
PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64")
PROBE_WHEEL = "packaging==26.4"          # the smallest pinned wheel (140 kB): proves the index is reachable
ENV_DIR = BASELINES_DIR.parent / "results" / "env"
DSL_RECORD = "DSL.json"


def requirements(specs: dict[str, dict]) -> list[str]:
    """Every pinned wheel the specs need: each framework wheel, then its deps (each once, in order)."""
    out: list[str] = []
    for spec in specs.values():
        for req in [spec["wheel"], *spec["deps"]]:
            if req not in out:
                out.append(req)
    return out


def pip_download_cmd(reqs: list[str], dest: Path, python_version: str | None = None) -> list[str]:
    py = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", py,
           "--implementation", "cp"]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    return cmd + ["-d", str(dest), *reqs]


def recorded_hashes(env_dir: Path = ENV_DIR) -> dict[str, str]:
    """wheel file name -> sha256, from the baseline packs the committed results' runs loaded."""
    out: dict[str, str] = {}
    for f in sorted(Path(env_dir).glob("*.json")):
        try:
            rec = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        bp = rec.get("baseline_pack")
        for fw in (bp.get("frameworks", []) if isinstance(bp, dict) else []):
            for w in fw.get("wheels", []):
                out.setdefault(w["file"], w["sha256"])
    return out


def probe_index(timeout_s: int = 5) -> tuple[bool, str]:
    """Can pip fetch from the package index? Downloads PROBE_WHEEL (140 kB) into a temporary folder."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--timeout",
               str(timeout_s), "--retries", "0", "-q", "-d", tmp, PROBE_WHEEL]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=6 * timeout_s)
        except subprocess.TimeoutExpired:
            return False, f"pip download {PROBE_WHEEL} timed out"
        if r.returncode != 0:
            return False, (r.stderr.strip().splitlines() or ["pip download failed"])[-1]
        got = list(Path(tmp).glob("*.whl"))
        return True, f"reached the package index ({got[0].name if got else PROBE_WHEEL})"


def resolve(reqs: list[str], python_version: str | None = None) -> list[dict]:
    """What the index would serve for each pinned requirement on this Python, without downloading a wheel:
    pip's dry-run install report (metadata only) -> [{requirement, file, sha256}]."""
    import subprocess
    import tempfile
    py = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "-q",
               "--only-binary=:all:", "--python-version", py, "--implementation", "cp", "--target", tmp,
               "--report", "-"]
        for plat in PLATFORMS:
            cmd += ["--platform", plat]
        r = subprocess.run(cmd + reqs, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"pip could not resolve {', '.join(reqs)}: "
                           f"{(r.stderr.strip().splitlines() or ['no output'])[-1]}")
    by_name = {_norm(i["metadata"]["name"]): i["download_info"] for i in json.loads(r.stdout)["install"]}
    out = []
    for req in reqs:
        info = by_name[_norm(parse_requirement(req)[0])]
        out.append({"requirement": req, "file": info["url"].rsplit("/", 1)[-1],
                    "sha256": info.get("archive_info", {}).get("hashes", {}).get("sha256", "")})
    return out


def _compare(resolved: list[dict], recorded: dict[str, str]) -> list[str]:
    bad = []
    for w in resolved:
        want = recorded.get(w["file"])
        state = "no committed record of this file" if want is None else \
            "matches the committed results' record" if want == w["sha256"] else "DIFFERS from the committed record"
        print(f"[pack]   {w['requirement']}: {w['file']} sha256 {w['sha256'][:16]}... {state}")
        if want is not None and want != w["sha256"]:
            bad.append(f"{w['file']}: index serves sha256 {w['sha256']}, the committed results' runs used {want}")
    return bad


def _py(python_version: str | None) -> tuple[str, str]:
    """('3.12', 'cp312') for the given version, default this interpreter's."""
    py = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
    return py, "cp" + py.replace(".", "")


def download_and_build(wheels_dir: Path, out_dir: Path, specs: dict[str, dict], dry_run: bool = False,
                       python_version: str | None = None) -> int:
    """Resolve the pinned wheels (metadata only) and compare their sha256 with the committed records; then,
    unless dry_run, download them, check the files' sha256 against what was resolved, and build the pack."""
    import subprocess
    reqs = requirements(specs)
    py, tag = _py(python_version)
    cmd = pip_download_cmd(reqs, wheels_dir, py)
    print("[pack] plan: " + " ".join(cmd))
    print(f"[pack] plan: python -m baselines.pack --wheels {wheels_dir} --out {out_dir} --python-tag {tag}")
    resolved = resolve(reqs, py)
    bad = _compare(resolved, recorded_hashes())
    if bad:
        print("[pack] refusing: " + "; ".join(bad), file=sys.stderr)
        return 1
    if dry_run:
        print(f"[pack] dry run: the index serves all {len(reqs)} pinned wheels; nothing downloaded, no pack built")
        return 0
    wheels_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(cmd, check=True)
    wheels = [find_wheel(wheels_dir, r, tag) for r in reqs]
    expect = {w["file"]: w["sha256"] for w in resolved}
    bad = [f"{w.name}: sha256 {got} != {expect[w.name]}" for w in wheels
           if w.name in expect and expect[w.name] and (got := _sha256(w)) != expect[w.name]]
    if bad:
        print("[pack] refusing to build: " + "; ".join(bad), file=sys.stderr)
        return 1
    return _report(build_pack(wheels_dir, out_dir, specs, tag), out_dir)


def install_dsl(wheels_dir: Path, out_dir: Path, dry_run: bool = False) -> int:
    """Download FlashInfer's CuTe DSL (SHIP_WHEELS, pinned), record their sha256 beside the pack, pip-install
    them without their own dependency pins (the exact wheels the air-gapped route installs), then the plain
    runtime dependencies their metadata declares (numpy, cuda-python, ...), resolved by pip."""
    import subprocess
    from baselines.ship_parts import collect_ship_wheels
    reqs = collect_ship_wheels(BASELINES_DIR)
    dest = wheels_dir / "dsl"
    cmd = pip_download_cmd(reqs, dest)
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps"]
    print("[pack] plan: " + " ".join(cmd))
    print("[pack] plan: " + " ".join(install) + f" {dest}/*.whl, then their declared runtime dependencies")
    _compare(resolve(reqs), recorded_hashes())
    if dry_run:
        print(f"[pack] dry run: {', '.join(reqs)}; nothing downloaded or installed")
        return 0
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(cmd, check=True)
    wheels = [find_wheel(dest, r, f"cp{sys.version_info.major}{sys.version_info.minor}") for r in reqs]
    subprocess.run(install + [str(w) for w in wheels], check=True)
    deps = sorted({d for w in wheels for d in _runtime_requires(w)})
    if deps:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *deps], check=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / DSL_RECORD).write_text(json.dumps(
        {"installed_by": "python -m baselines.pack --install-dsl", "python": sys.executable,
         "wheels": [{"file": w.name, "sha256": _sha256(w)} for w in wheels], "runtime_requires": deps},
        indent=1) + "\n")
    print(f"[pack] installed {', '.join(w.name for w in wheels)}; sha256 in {out_dir / DSL_RECORD}")
    return 0


def _runtime_requires(wheel: Path) -> list[str]:
    """Requires-Dist of a wheel that applies here: no extras, markers true, not a CuTe-DSL wheel itself."""
    from packaging.requirements import Requirement
    with zipfile.ZipFile(wheel) as z:
        meta = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
        text = z.read(meta).decode() if meta else ""
    out = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if req.name.startswith("nvidia-cutlass-dsl"):
            continue
        out.append(str(req))
    return out


def _report(man: dict, out: Path) -> int:
    for fw in man["frameworks"]:
        ext = ", ".join(fw["external"]) or "-"
        print(f"{fw['requirement']}: {len(fw['modules'])} modules for {', '.join(fw['adapters'])}; external: {ext}")
    print(f"wrote {man['files']} files, {man['bytes'] / 2**20:.2f} MiB to {out}/{SITE}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m baselines.pack", description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", default=".whl", type=Path, help="folder holding the downloaded official wheels")
    ap.add_argument("--out", default=".baseline_pack", type=Path, help="pack folder to (re)build")
    ap.add_argument("--python-tag", default="cp312", help="preferred wheel build when several are present")
    ap.add_argument("--only", nargs="*", help="requirements to pack (default: every adapter's)")
    net = ap.add_argument_group("networked set-up (./run_all.sh calls these on a GPU host that reaches the index)")
    net.add_argument("--download", action="store_true",
                     help="pip-download the pinned wheels into --wheels (this interpreter's Python), check them "
                          "against the committed results' sha256 records, then build the pack")
    net.add_argument("--install-dsl", action="store_true",
                     help="download and pip-install FlashInfer's CuTe DSL (the adapters' SHIP_WHEELS)")
    net.add_argument("--probe-index", action="store_true",
                     help=f"exit 0 if pip can download {PROBE_WHEEL} (140 kB), else 1")
    net.add_argument("--dry-run", action="store_true",
                     help="with --download / --install-dsl: resolve the wheels on the index (metadata only), compare "
                          "their sha256 with the committed records and print the plan; download nothing")
    net.add_argument("--python-version", default=None,
                     help="with --download: the Python of the host that will load the pack (default: this one), "
                          "e.g. 3.12 to build on a networked machine for an air-gapped GPU host")
    args = ap.parse_args(argv)
    # --download and --install-dsl fill --wheels (made when missing); only a build from wheels already there
    # needs the folder to exist
    networked = args.download or args.install_dsl or args.probe_index
    if args.wheels.exists() and not args.wheels.is_dir():
        ap.error(f"--wheels {args.wheels}: a file, not a folder")
    if not networked and not args.wheels.is_dir():
        ap.error(f"--wheels {args.wheels}: no such folder (download the official wheels into it first, or "
                 "add --download)")
    specs = collect_specs()
    if args.only:
        try:
            wanted = {f"{_norm(d)}=={v}" for d, v in map(parse_requirement, args.only)}
        except ValueError as e:
            ap.error(f"--only: {e}")
        unknown = wanted - set(specs)
        if unknown:
            ap.error(f"--only: no adapter declares {sorted(unknown)}; declared: {sorted(specs)}")
        specs = {k: v for k, v in specs.items() if k in wanted}
    if args.probe_index:
        ok, msg = probe_index()
        print(f"[pack] {msg}")
        return 0 if ok else 1
    if args.download or args.install_dsl:
        rc = download_and_build(args.wheels, args.out, specs, args.dry_run, args.python_version) \
            if args.download else 0
        if rc == 0 and args.install_dsl:
            rc = install_dsl(args.wheels, args.out, args.dry_run)
        return rc
    return _report(build_pack(args.wheels, args.out, specs, args.python_tag), args.out)


if __name__ == "__main__":
    sys.exit(main())
