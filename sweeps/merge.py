"""Merge results into one table: `python -m sweeps.merge suite=operator [results_dir=results] [from=DIR
[keep_paths=a,b]]`.

Without `from`: shards (launcher=joblib_gpus / launcher=slurm, or shard.index=i shard.count=n by hand) write
results/<suite>.shard<i>-of-<n>.csv; this folds them into results/<suite>.csv, refusing a config_hash that
two files record with different values (sweeps.tables.merge_shards). The launcher configs run it
automatically when every job has ended (MergeShardsCallback).
With `from=DIR`: DIR holds a re-run (e.g. `redo=...` into a copy, or some geometries run again into a fresh
folder after a fix); its rows replace those of the same cells, except rows of `keep_paths`, and its runs' env
records are copied beside the table (sweeps.tables.fold_rerun). A latency ratio pairs only rows of one run,
so re-run whole shapes (every path) when their timings should pair.
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from hydra.experimental.callback import Callback

from sweeps.spec import results_dir_of
from sweeps.tables import ResultsFileError, fold_rerun, merge_shards, read_rows

ARGS = ("suite", "results_dir", "from", "keep_paths")


def parse_args(argv: list[str]) -> dict:
    args = {"results_dir": "results"}
    for a in argv:
        key, sep, val = a.partition("=")
        if not sep or key not in ARGS or not val:
            raise ValueError(f"bad argument {a!r}: expected {' '.join(k + '=...' for k in ARGS)}")
        args[key] = val
    if "suite" not in args:
        raise ValueError("missing argument suite=<name>")
    if "keep_paths" in args and "from" not in args:
        raise ValueError("keep_paths=... applies only with from=<re-run folder>")
    return args


def wall_report(results_dir: Path, suite: str) -> str:
    """Each run behind results/<suite>.csv with its wall time (env/<run_id>.wall.json): the N-GPU wall time of
    a sharded multirun is the longest of its shards' runs, against one GPU's single run (the scaling comparison)."""
    runs = Counter(r["run_id"] for r in read_rows(results_dir / f"{suite}.csv"))
    lines = []
    for run_id, n in sorted(runs.items()):
        f = results_dir / "env" / f"{run_id}.wall.json"
        wall = json.loads(f.read_text())["wall_s"] if f.exists() else None
        lines.append(f"  {run_id}: {n} row(s), " + (f"{wall:.0f} s wall" if wall is not None else "no wall record"))
    return "\n".join(lines)


class MergeShardsCallback(Callback):
    """Hydra callback: after a sharded multirun, merge the shards of the suite it ran."""

    def on_multirun_end(self, config, **kwargs) -> None:
        if config.shard.count > 1:
            path, added = merge_shards(results_dir_of(config), config.suite.name)
            print(f"[sweeps.merge] {added} row(s) merged into {path}; its runs:\n"
                  f"{wall_report(results_dir_of(config), config.suite.name)}")


def main(argv: list[str]) -> int:
    try:
        args = parse_args(argv)
        results_dir = Path(args["results_dir"])
        if "from" in args:
            keep = tuple(p for p in args.get("keep_paths", "").split(",") if p)
            done = fold_rerun(results_dir, args["suite"], Path(args["from"]), keep)
            print(f"[sweeps.merge] from {args['from']}: {done['replaced']} row(s) replaced, {done['added']} added, "
                  f"{done['kept']} of {list(keep)} left as they were; env records of {done['runs']} copied"
                  + (f"; env records with no row left: {done['orphaned']}" if done["orphaned"] else ""))
            return 0
        path, added = merge_shards(results_dir, args["suite"])
    except (ValueError, ResultsFileError) as e:
        print(f"[sweeps.merge] {e}", file=sys.stderr)
        return 1
    print(f"[sweeps.merge] {added} row(s) merged into {path}; its runs:\n"
          f"{wall_report(results_dir, args['suite'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
