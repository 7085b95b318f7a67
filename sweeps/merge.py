"""Merge results into one table: `python -m sweeps.merge suite=operator [results_dir=results] [from=DIR
[keep_paths=a,b]]`.

Without `from`: shards (launcher=joblib_gpus / launcher=slurm, or shard.index=i shard.count=n by hand) write
results/<suite>.shard<i>-of-<n>.csv; this folds them into results/<suite>.csv, refusing a config_hash that
two files record with different values (artifact.results.merge_shards). The launcher configs run it
automatically when every job has ended (MergeShardsCallback).
With `from=DIR`: DIR holds a re-run (e.g. `redo=...` into a copy, or some geometries run again into a fresh
folder after a fix); its rows replace those of the same cells, except rows of `keep_paths`, and its runs' env
records are copied beside the table (artifact.results.fold_rerun). A latency ratio pairs only rows of one run,
so re-run whole shapes (every path) when their timings should pair.

Every argument is checked before any file is touched: the suite must be one of sweeps/conf/suite, the folders
must exist, `keep_paths` must name registered paths. Every table is read whole: a line that is not a valid row
refuses the merge, naming its file and line (with the repair command); a torn last line is left out and said.
Exit status: 0 merged; 1 a table refused the merge (invalid or conflicting rows, a writer still running); 2 bad
usage.
"""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from hydra.experimental.callback import Callback

from artifact.results import ResultsFileError, fold_rerun, merge_shards, read_rows, read_wall
from sweeps.spec import results_dir_of

ARGS = ("suite", "results_dir", "from", "keep_paths")
EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2
SUITES = tuple(sorted(p.stem for p in (Path(__file__).parent / "conf" / "suite").glob("*.yaml")))


class UsageError(ValueError):
    """A bad argument (the message names it)."""


def parse_args(argv: list[str]) -> dict:
    from artifact.registry import PATHS
    args = {"results_dir": "results"}
    seen = set()
    for a in argv:
        key, sep, val = a.partition("=")
        if not sep or key not in ARGS or not val:
            raise UsageError(f"bad argument {a!r}: expected {' '.join(k + '=...' for k in ARGS)}")
        if key in seen:
            raise UsageError(f"argument {key}= given twice")
        seen.add(key)
        args[key] = val
    if "suite" not in args:
        raise UsageError("missing argument suite=<name>")
    if args["suite"] not in SUITES:
        raise UsageError(f"suite={args['suite']!r}: not a suite; suites: {', '.join(SUITES)}")
    if not Path(args["results_dir"]).is_dir():
        raise UsageError(f"results_dir={args['results_dir']!r}: no such folder")
    if "keep_paths" in args and "from" not in args:
        raise UsageError("keep_paths=... applies only with from=<re-run folder>")
    if "from" in args:
        if not Path(args["from"]).is_dir():
            raise UsageError(f"from={args['from']!r}: no such folder")
        if Path(args["from"]).resolve() == Path(args["results_dir"]).resolve():
            raise UsageError(f"from={args['from']!r} is results_dir itself")
    keep = [p for p in args.get("keep_paths", "").split(",") if p]
    unknown = [p for p in keep if p not in PATHS]
    if unknown:
        raise UsageError(f"keep_paths: {unknown} not registered path(s) (a misspelt path would keep nothing and "
                         f"let the re-run's rows replace it); registered: {', '.join(PATHS)}")
    args["keep_paths"] = tuple(keep)
    return args


def wall_report(results_dir: Path, suite: str) -> str:
    """Each run behind results/<suite>.csv with its wall time (env/<run_id>.wall.json): the N-GPU wall time of
    a sharded multirun is the longest of its shards' runs, against one GPU's single run (the scaling comparison)."""
    runs = Counter(r["run_id"] for r in read_rows(results_dir / f"{suite}.csv"))
    lines = []
    for run_id, n in sorted(runs.items()):
        try:
            wall = read_wall(results_dir, run_id)
            said = f"{float(wall['wall_s']):.0f} s wall" if wall else "no wall record"
        except ResultsFileError as e:
            said = str(e)
        lines.append(f"  {run_id}: {n} row(s), {said}")
    return "\n".join(lines)


class MergeShardsCallback(Callback):
    """Hydra callback: after a sharded multirun, merge the shards of the suite it ran."""

    def on_multirun_end(self, config, **kwargs) -> None:
        if config.shard.count > 1:
            notes: list[str] = []
            path, added = merge_shards(results_dir_of(config), config.suite.name, notes)
            for note in notes:
                print(f"[sweeps.merge] {note}", file=sys.stderr)
            print(f"[sweeps.merge] {added} row(s) merged into {path}; its runs:\n"
                  f"{wall_report(results_dir_of(config), config.suite.name)}")


def main(argv: list[str]) -> int:
    try:
        args = parse_args(argv)
    except UsageError as e:
        print(f"[sweeps.merge] {e}\nusage: python -m sweeps.merge suite=<name> [results_dir=DIR] "
              "[from=DIR [keep_paths=path,...]]", file=sys.stderr)
        return EXIT_USAGE
    results_dir, notes = Path(args["results_dir"]), []
    try:
        if "from" in args:
            keep = args["keep_paths"]
            done = fold_rerun(results_dir, args["suite"], Path(args["from"]), keep, notes)
        else:
            path, added = merge_shards(results_dir, args["suite"], notes)
    except ResultsFileError as e:
        for note in notes:
            print(f"[sweeps.merge] {note}", file=sys.stderr)
        print(f"[sweeps.merge] {e}", file=sys.stderr)
        return EXIT_REFUSED
    for note in notes:
        print(f"[sweeps.merge] {note}", file=sys.stderr)
    if "from" in args:
        print(f"[sweeps.merge] from {args['from']}: {done['replaced']} row(s) replaced, {done['added']} added, "
              f"{done['kept']} of {list(keep)} left as they were; env records of {done['runs']} copied"
              + (f"; env records with no row left: {done['orphaned']}" if done["orphaned"] else ""))
        return EXIT_OK
    print(f"[sweeps.merge] {added} row(s) merged into {path}; its runs:\n"
          f"{wall_report(results_dir, args['suite'])}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
