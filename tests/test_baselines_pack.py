"""The offline baseline pack: built from a tiny fake framework wheel made here, then loaded from."""
import json
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from baselines import pack

REPO = Path(__file__).resolve().parent.parent

FAKE_FW = {
    "fakefw/__init__.py": "from fakefw.version import __version__\n",
    "fakefw/version.py": "__version__ = '1.0'\n",
    "fakefw/server.py": "import nonexistent_server_dep\n",                    # never reached
    "fakefw/ops/__init__.py": "import fakefw.ops.registry\nRAN_OPS_INIT = True\n",   # stubbed
    "fakefw/ops/registry.py": "import fakefw.server\n",
    "fakefw/ops/kern.py": textwrap.dedent("""\
        from typing import TYPE_CHECKING
        from fakefw.util import helper_value
        from .helper import HELP
        import fakefw._C_ext
        if TYPE_CHECKING:
            import fakefw.typing_only
        def run():
            from fakefw.lazyhelper import LAZY
            return helper_value() + HELP + LAZY
        """),
    "fakefw/ops/helper.py": "HELP = 10\n",
    "fakefw/util.py": textwrap.dedent("""\
        from fakedep import DEP
        from absentdep.sub import thing
        def helper_value():
            return DEP
        def uses_absent():
            return thing()
        """),
    "fakefw/lazyhelper.py": "LAZY = 100\n",
    "fakefw/typing_only.py": "raise RuntimeError('typing only')\n",
    "fakefw/unused.py": "X = 1\n",
    "fakefw/LICENSE": "fake licence\n",
    "fakefw/_C_ext.abi3.so": "\x7fELF not really\n",
    "fakefw-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: fakefw\nVersion: 1.0\n",
    "fakefw-1.0.dist-info/RECORD": "",
}
FAKE_DEP = {
    "fakedep/__init__.py": "DEP = 1\n",
    "fakedep-2.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: fakedep\nVersion: 2.0\n",
}
SPEC = {
    "wheel": "fakefw==1.0",
    "modules": ["fakefw.ops.kern"],
    "follow_lazy": ["fakefw.ops"],
    "stub_packages": ["fakefw.ops"],
    "extension_stubs": ["fakefw._C_ext"],
    "placeholders": ["absentdep"],
    "deps": ["fakedep==2.0"],
}
EXPECTED_SITE_FILES = {
    "fakefw/__init__.py", "fakefw/version.py", "fakefw/ops/kern.py", "fakefw/ops/helper.py", "fakefw/util.py",
    "fakefw/lazyhelper.py", "fakefw/LICENSE", "fakefw-1.0.dist-info/METADATA",
    "fakedep/__init__.py", "fakedep-2.0.dist-info/METADATA",
}


def _wheel(path: Path, files: dict) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


@pytest.fixture
def wheels(tmp_path):
    d = tmp_path / "whl"
    d.mkdir()
    _wheel(d / "fakefw-1.0-cp312-abi3-manylinux_2_28_x86_64.whl", FAKE_FW)
    _wheel(d / "fakedep-2.0-py3-none-any.whl", FAKE_DEP)
    return d


@pytest.fixture
def adapters(tmp_path):
    d = tmp_path / "adapters"
    d.mkdir()
    (d / "fake_adapter.py").write_text(f"import not_importable_here\nPACK_SPEC = {SPEC!r}\n")
    (d / "no_spec.py").write_text("X = 1\n")
    return d


def _site_files(out: Path) -> set[str]:
    site = out / "site"
    return {str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()}


def test_pack_extracts_exactly_the_closure(wheels, adapters, tmp_path):
    specs = pack.collect_specs(adapters)          # reads the literal without importing the adapter
    assert list(specs) == ["fakefw==1.0"] and specs["fakefw==1.0"]["adapters"] == ["fake_adapter"]
    out = tmp_path / "pack"
    man = pack.build_pack(wheels, out, specs)
    assert _site_files(out) == EXPECTED_SITE_FILES
    assert (out / "site/fakefw/ops/kern.py").read_bytes() == FAKE_FW["fakefw/ops/kern.py"].encode()
    fw = json.loads((out / "MANIFEST.json").read_text())["frameworks"][0]
    assert fw["stubbed_packages"] == ["fakefw.ops"]
    assert fw["external"] == ["absentdep"]
    assert [w["file"] for w in fw["wheels"]][0].startswith("fakefw-1.0")
    assert man["files"] == len(EXPECTED_SITE_FILES)
    # a rebuild replaces the pack; a folder that is not a pack is never replaced
    (out / "site/stale.py").write_text("")
    pack.build_pack(wheels, out, specs)
    assert _site_files(out) == EXPECTED_SITE_FILES
    other = tmp_path / "not_a_pack"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="not_a_pack"):
        pack.build_pack(wheels, other, specs)


def test_loader_imports_from_the_pack(wheels, adapters, tmp_path):
    out = tmp_path / "pack"
    pack.build_pack(wheels, out, pack.collect_specs(adapters))
    code = textwrap.dedent(f"""
        import sys
        from baselines import _load
        spec = {SPEC!r}
        kern = _load.load(spec, "fakefw.ops.kern")
        assert kern.__file__.startswith({str(out / "site")!r}), kern.__file__
        assert kern.run() == 111
        assert not hasattr(sys.modules["fakefw.ops"], "RAN_OPS_INIT")   # stubbed __init__ never ran
        assert "fakefw.ops.registry" not in sys.modules
        import fakefw.util
        try:
            fakefw.util.uses_absent()
        except ImportError as e:
            assert "absentdep.sub.thing" in str(e)
        else:
            raise AssertionError("placeholder call did not raise")
        import importlib.util     # the placeholders served the import only: the rest of the process sees the host
        assert "absentdep" not in sys.modules and importlib.util.find_spec("absentdep") is None
        assert _load.load(spec, "fakefw.ops.kern") is kern and "absentdep" not in sys.modules
        print("LOADED")
        """)
    env = {"ONELA_BASELINE_PACK": str(out), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0 and "LOADED" in r.stdout, r.stderr


def test_missing_pack_gives_reason(tmp_path):
    code = textwrap.dedent(f"""
        from baselines import _load
        print(_load.unavailable_reason({SPEC!r}, ["fakefw.ops.kern"]))
        """)
    env = {"ONELA_BASELINE_PACK": str(tmp_path / "none"), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert "fakefw==1.0: cannot import fakefw.ops.kern" in r.stdout and "no baseline pack built" in r.stdout


@pytest.mark.parametrize("bad, match", [
    ({**SPEC, "wheel": "fakefw>=1.0"}, "fakefw>=1.0"),
    ({**SPEC, "modules": []}, "empty"),
    ({**SPEC, "deps": "fakedep==2.0"}, "deps"),
    ({**SPEC, "colour": ["x"]}, "colour"),
])
def test_bad_spec_is_named(bad, match):
    with pytest.raises(ValueError, match=match):
        pack.validate_spec(bad, "adapter.py")


def test_missing_wheel_and_module(wheels, tmp_path):
    with pytest.raises(FileNotFoundError, match="pip download"):
        pack.find_wheel(wheels, "vllm==0.0.1")
    spec = {**SPEC, "modules": ["fakefw.ops.nope"], "adapters": []}
    with pytest.raises(ValueError, match="fakefw.ops.nope"):
        pack.build_pack(wheels, tmp_path / "p", {"fakefw==1.0": spec})


def test_every_adapter_spec_is_valid():
    specs = pack.collect_specs()
    assert {"vllm==0.33.0", "sglang==0.5.23"} <= set(specs)


def test_real_pack_is_small(tmp_path):
    """With the official wheels downloaded (.whl/), the pack holds every declared module and stays small."""
    specs = pack.collect_specs()
    try:
        for spec in specs.values():
            for req in [spec["wheel"], *spec["deps"]]:
                pack.find_wheel(REPO / ".whl", req)
    except FileNotFoundError as e:
        pytest.skip(f"official wheels not downloaded: {e}")
    man = pack.build_pack(REPO / ".whl", tmp_path / "pack", specs)
    assert man["bytes"] < 32 * 2**20      # the whole repo tree plus carried folders must stay under 64 MiB
    site = tmp_path / "pack" / "site"
    for fw in man["frameworks"]:
        for m in fw["modules"]:
            p = site / m.replace(".", "/")
            assert p.with_suffix(".py").is_file() or (p / "__init__.py").is_file(), m


def test_download_makes_the_wheels_folder_instead_of_demanding_it(tmp_path, monkeypatch):
    """README's first pack command (`--download --dry-run`) in a fresh clone, where .whl/ does not exist yet,
    goes on to the download (the network part is replaced here); without --download the folder must exist,
    and a file in its place is named."""
    seen = []
    monkeypatch.setattr(pack, "download_and_build", lambda wheels, out, specs, dry, py: seen.append(
        (wheels, dry, py)) or 0)
    monkeypatch.chdir(tmp_path)
    assert pack.main(["--download", "--dry-run", "--python-version", "3.12"]) == 0
    assert seen == [(Path(".whl"), True, "3.12")] and not (tmp_path / ".whl").exists()   # a dry run makes nothing
    with pytest.raises(SystemExit) as e:
        pack.main([])
    assert e.value.code == 2
    (tmp_path / "f").write_text("")
    with pytest.raises(SystemExit) as e:
        pack.main(["--download", "--wheels", "f"])
    assert e.value.code == 2 and len(seen) == 1


def test_no_extra_installs_a_framework_the_pack_carries():
    """pyproject's extras name nothing the baseline pack takes from a framework wheel: those wheels pin torch
    releases other than the project's and cannot be installed beside it (the pack is the way in)."""
    import tomllib
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    frameworks = {pack._norm(pack.parse_requirement(spec["wheel"])[0]) for spec in pack.collect_specs().values()}
    named = {(extra, req) for extra, reqs in extras.items() for req in reqs
             if pack._norm(re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0]) in frameworks}
    assert not named, f"extras that would install a framework wheel: {sorted(named)}"


def test_a_skip_reason_names_the_pack_by_what_it_holds_not_where_it_lies(wheels, adapters, tmp_path):
    """An import that fails names the pack by its frameworks' name==version (its manifest), never by its folder,
    also where Python's own message carries a file of the pack: a committed table's reasons read alike on every
    host."""
    out = tmp_path / "pack"
    pack.build_pack(wheels, out, pack.collect_specs(adapters))
    (out / "site" / "fakefw" / "badimport.py").write_text("from fakefw.version import nothing\n")
    code = textwrap.dedent(f"""
        from baselines import _load
        spec = {SPEC!r}
        print(_load.unavailable_reason({{**spec, "wheel": "otherfw==2.0", "stub_packages": []}}, ["otherfw.kern"]))
        print(_load.unavailable_reason(spec, ["fakefw.badimport"]))
        """)
    env = {"ONELA_BASELINE_PACK": str(out), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    missing, bad = r.stdout.splitlines()
    assert missing.startswith("otherfw==2.0: cannot import otherfw.kern from the baseline pack (fakefw==1.0): "
                              "ModuleNotFoundError"), missing
    assert "cannot import name 'nothing' from 'fakefw.version' (<pack>/site/fakefw/version.py)" in bad, bad
    assert str(tmp_path) not in r.stdout and "pack/site" not in missing
