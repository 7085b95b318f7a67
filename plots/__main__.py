"""`python -m plots [--results DIR] [--out DIR]`: every figure and REPORT.md from results/ alone.

Needs no GPU and no torch; a suite with no file yet gives a "no data yet" figure and "not measured yet" rows.
Reading the repository's own results/, it also rewrites README.md's claims table (plots/report.py).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from plots import (fig6_full_model, fig7_generality, fig8_sources, fig_beam_scaling, fig_breakdown,
                   fig_floor_geometry, report)
from plots.data import load_results
from plots.style import setup

REPO = Path(__file__).resolve().parent.parent

FIGURES = (fig6_full_model, fig7_generality, fig8_sources, fig_floor_geometry, fig_breakdown, fig_beam_scaling)


def main(argv: list[str] | None = None) -> list[Path]:
    ap = argparse.ArgumentParser(prog="python -m plots", description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="results", help="results directory (default: results/)")
    ap.add_argument("--out", default=None, help="figure directory (default: <results>/figures)")
    ap.add_argument("--report", default=None, help="report path (default: <results>/REPORT.md)")
    ap.add_argument("--readme", default=None,
                    help="README whose claims table to rewrite (default: the repository's README.md when --results "
                         "is the repository's results/, else none)")
    args = ap.parse_args(argv)
    root = Path(args.results)
    if not root.is_dir():
        ap.error(f"--results {root}: no such folder")
    out = Path(args.out) if args.out else root / "figures"
    t0 = time.perf_counter()
    setup()
    res = load_results(root)
    print(f"[plots] read {root}/: " + ", ".join(f"{s} {len(df)} rows" for s, df in res.suites.items())
          + f"; {len(res.env)} env records")
    written: list[Path] = []
    for mod in FIGURES:
        t = time.perf_counter()
        files = mod.render(res, out)
        written += files
        print(f"[plots] {files[0]} (+pdf) in {time.perf_counter() - t:.1f} s")
    rep = report.write(res, Path(args.report) if args.report else root / "REPORT.md", written)
    readme = Path(args.readme) if args.readme else \
        (REPO / "README.md" if root.resolve() == (REPO / "results").resolve() else None)
    if readme is not None:
        try:
            changed = report.update_readme(readme, res)
            print(f"[plots] {readme}: claims table {'rewritten' if changed else 'unchanged'}")
        except ValueError as e:
            print(f"[plots] {e}; left as it is")
    print(f"[plots] {rep}; total {time.perf_counter() - t0:.1f} s")
    return written + [rep]


if __name__ == "__main__":
    main()
