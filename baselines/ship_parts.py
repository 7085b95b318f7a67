"""Carry compiled wheels too large for one GPU call (64 MiB of tree per call) in parts, and install them there.

Here (module mode; reads every adapter's SHIP_WHEELS literal, finds the wheels in --wheels):
    python -m baselines.ship_parts split --wheels .whl --out .whl/ship
splits each wheel over --part-mib into parts and bins parts and small wheels into folders out/call1, call2, ...
(each at most --call-mib, the lightest last, since the last call also carries the pack and the tree), each with
the same SHIP.json (every wheel's size, sha256 and parts). On the GPU host, one call per folder, in order:
    python3 baselines/ship_parts.py receive --from .whl/ship/call1
    python3 baselines/ship_parts.py receive --from .whl/ship/call2 --install /tmp/site
`receive` copies the folder's pieces into --stage (default /tmp/ship, which outlives a call while the machine
stays warm); with --install it reassembles every wheel, checks its sha256 and pip-installs them all into the
--target folder (--no-index --no-deps), or exits non-zero naming the parts still missing. Stdlib only.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

MANIFEST = "SHIP.json"
MIB = 1 << 20


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            h.update(block)
    return h.hexdigest()


def read_ship_wheels(path: Path) -> list[str]:
    """The literal SHIP_WHEELS list of one adapter file ([] if it defines none)."""
    for node in ast.parse(Path(path).read_text(), filename=str(path)).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SHIP_WHEELS"
                                                for t in node.targets):
            val = ast.literal_eval(node.value)
            if not isinstance(val, list) or not all(isinstance(x, str) and "==" in x for x in val):
                raise ValueError(f"{path}: SHIP_WHEELS must be a list of 'name==version' strings, got {val!r}")
            return val
    return []


def collect_ship_wheels(baselines_dir: Path) -> list[str]:
    out: list[str] = []
    for path in sorted(Path(baselines_dir).glob("*.py")):
        out += [w for w in read_ship_wheels(path) if w not in out]
    return out


def split(wheels: list[Path], out: Path, part_bytes: int, call_bytes: int) -> dict:
    """Cut wheels into parts of at most part_bytes; bin all pieces into call folders of at most call_bytes."""
    if part_bytes < 1 or call_bytes < part_bytes:
        raise ValueError(f"need 1 <= part size <= call size, got part {part_bytes} B, call {call_bytes} B")
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    pieces = []                                   # (name, size, source path, offset)
    manifest = {"wheels": []}
    for w in wheels:
        size = w.stat().st_size
        entry = {"file": w.name, "size": size, "sha256": _sha256(w), "parts": []}
        if size <= part_bytes:
            pieces.append((w.name, size, w, 0))
        else:
            for i, off in enumerate(range(0, size, part_bytes)):
                name = f"{w.name}.part{i:03d}"
                n = min(part_bytes, size - off)
                entry["parts"].append(name)
                pieces.append((name, n, w, off))
        manifest["wheels"].append(entry)
    calls: list[list] = []
    for piece in sorted(pieces, key=lambda p: -p[1]):        # first-fit decreasing
        for call in calls:
            if sum(p[1] for p in call) + piece[1] <= call_bytes:
                call.append(piece)
                break
        else:
            calls.append([piece])
    calls.sort(key=lambda c: -sum(p[1] for p in c))           # the lightest call last
    manifest["calls"] = [[p[0] for p in c] for c in calls]
    for i, call in enumerate(calls, 1):
        d = out / f"call{i}"
        d.mkdir(parents=True)
        for name, n, src, off in call:
            with open(src, "rb") as f_in, open(d / name, "wb") as f_out:
                f_in.seek(off)
                f_out.write(f_in.read(n))
        (d / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def receive(src: Path, stage: Path) -> dict:
    """Copy one call folder's pieces into the stage folder; returns the manifest."""
    src, stage = Path(src), Path(stage)
    if not (src / MANIFEST).is_file():
        raise FileNotFoundError(f"{src} holds no {MANIFEST}: carry a folder written by `ship_parts split`")
    stage.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        shutil.copyfile(f, stage / f.name)
    return json.loads((src / MANIFEST).read_text())


def assemble(stage: Path, manifest: dict) -> list[Path]:
    """Every wheel of the manifest, whole and sha256-checked, in the stage folder (ValueError if incomplete)."""
    stage = Path(stage)
    missing = [p for w in manifest["wheels"] for p in (w["parts"] or [w["file"]])
               if not (stage / w["file"]).is_file() and not (stage / p).is_file()]
    if missing:
        raise ValueError(f"parts not yet received into {stage}: {missing}; run the earlier calls' "
                         f"`receive` first (a fresh GPU machine has an empty stage)")
    out = []
    for w in manifest["wheels"]:
        dest = stage / w["file"]
        if w["parts"] and not (dest.is_file() and dest.stat().st_size == w["size"]):
            with open(dest, "wb") as f_out:
                for p in w["parts"]:
                    with open(stage / p, "rb") as f_in:
                        shutil.copyfileobj(f_in, f_out, MIB)
        got = _sha256(dest)
        if got != w["sha256"]:
            raise ValueError(f"{dest.name}: sha256 {got} != {w['sha256']} (a part was damaged or mixed up)")
        out.append(dest)
    return out


def pip_install(wheels: list[Path], target: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", str(target), *map(str, wheels)], check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ship_parts", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("split", help="(here) cut SHIP_WHEELS into parts and call folders")
    sp.add_argument("--wheels", type=Path, default=Path(".whl"))
    sp.add_argument("--out", type=Path, default=Path(".whl/ship"))
    sp.add_argument("--part-mib", type=float, default=40)
    sp.add_argument("--call-mib", type=float, default=56)
    rp = sub.add_parser("receive", help="(GPU host) stage one call folder; with --install, install all")
    rp.add_argument("--from", dest="src", type=Path, required=True)
    rp.add_argument("--stage", type=Path, default=Path("/tmp/ship"))
    rp.add_argument("--install", type=Path, metavar="TARGET", help="pip --target folder, once all parts are in")
    args = ap.parse_args(argv)
    if args.cmd == "split":
        if not args.part_mib > 0 or not args.call_mib >= args.part_mib:
            ap.error(f"need 0 < --part-mib <= --call-mib, got {args.part_mib} and {args.call_mib}")
        if not args.wheels.is_dir():
            ap.error(f"--wheels {args.wheels}: no such folder")
    elif not args.src.is_dir():
        ap.error(f"--from {args.src}: no such folder")
    if args.cmd == "split":
        from baselines.pack import find_wheel     # here only: the GPU side needs nothing but the stdlib
        reqs = collect_ship_wheels(Path(__file__).resolve().parent)
        if not reqs:
            raise SystemExit("no adapter declares SHIP_WHEELS")
        wheels = [find_wheel(args.wheels, r) for r in reqs]
        man = split(wheels, args.out, int(args.part_mib * MIB), int(args.call_mib * MIB))
        for i, names in enumerate(man["calls"], 1):
            size = sum((args.out / f"call{i}" / n).stat().st_size for n in names)
            print(f"call{i}: {len(names)} pieces, {size / MIB:.2f} MiB -> carry {args.out}/call{i}")
        return 0
    man = receive(args.src, args.stage)
    print(f"staged {args.src} into {args.stage}")
    if args.install:
        wheels = assemble(args.stage, man)
        pip_install(wheels, args.install)
        print(f"installed {', '.join(w.name for w in wheels)} into {args.install}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
