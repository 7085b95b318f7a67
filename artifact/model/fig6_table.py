"""Print Figure 6 from full_model rows: decode-forward ms per path x (prompt, O), the recurrent share, and the
two comparisons the paper makes (OneLA vs Controlled FullState; Controlled vs vLLM-kernel FullState)."""
from __future__ import annotations

import math

FIG6_PATHS = ("onela", "controlled_fullstate", "vllm_fullstate", "vllm_prefix_replay")
# The project's Fig 6 targets (docs/design.md §7): OneLA >= 2.5x Controlled FullState at every point (the paper
# reports 1.54-2.46x), and Controlled FullState within 10 % of vLLM FullState (the paper: 6.9-9.3 %).
TARGET_SPEEDUP = 2.5
TARGET_CONTROLLED_PCT = 10


def _ok(x) -> bool:
    return isinstance(x, (int, float)) and not math.isnan(float(x))


def format_fig6(rows: list[dict], recurrent: dict | None = None) -> str:
    """rows: results rows (status, path, prompt_len, T, latency_ms); recurrent: config_hash -> recurrent_ms."""
    recurrent = recurrent or {}
    lat, rec, status = {}, {}, {}
    for r in rows:
        key = (r["path"], int(r["prompt_len"]), int(r["T"]) + 1)
        status[key] = r["status"] if r["status"] != "ok" else ""
        if r["status"] == "ok" and _ok(r.get("latency_ms")):
            lat[key] = float(r["latency_ms"])
            rm = r.get("recurrent_ms", recurrent.get(r.get("config_hash")))
            if _ok(rm):
                rec[key] = float(rm)
    paths = [p for p in FIG6_PATHS if any(k[0] == p for k in status)] + \
        sorted({k[0] for k in status} - set(FIG6_PATHS))
    prompts = sorted({k[1] for k in status})
    Os = sorted({k[2] for k in status})
    out = ["Figure 6: decode-forward GPU time, ms summed over T = O-1 calls (recurrent-state share in brackets)"]
    for L in prompts:
        out.append(f"\nprompt {L}")
        out.append(f"{'path':<22}" + "".join(f"{'O=' + str(o):>20}" for o in Os))
        for p in paths:
            cells = []
            for o in Os:
                k = (p, L, o)
                if k in lat:
                    cells.append(f"{lat[k]:9.3f}" + (f" [{rec[k]:7.3f}]" if k in rec else " " * 10))
                else:
                    cells.append(status.get(k, "-") or "ok, untimed")
            out.append(f"{p:<22}" + "".join(f"{c:>20}" for c in cells))
    out.append("")
    out += _ratios(lat, prompts, Os, "onela", "controlled_fullstate",
                   "OneLA speedup over Controlled FullState", TARGET_SPEEDUP, "x", lambda a, b: b / a)
    out += _ratios(lat, prompts, Os, "controlled_fullstate", "vllm_fullstate",
                   "Controlled FullState vs vLLM FullState |ratio-1|", TARGET_CONTROLLED_PCT, "%",
                   lambda a, b: abs(a / b - 1) * 100)
    out += _ratios(lat, prompts, Os, "onela", "vllm_fullstate", "OneLA speedup over vLLM FullState", None, "x",
                   lambda a, b: b / a)
    out += _ratios(lat, prompts, Os, "onela", "vllm_prefix_replay", "OneLA speedup over vLLM prefix-cache replay",
                   None, "x",
                   lambda a, b: b / a)
    return "\n".join(out)


def _ratios(lat, prompts, Os, a, b, title, target, unit, fn) -> list[str]:
    vals = {(L, o): fn(lat[(a, L, o)], lat[(b, L, o)]) for L in prompts for o in Os
            if (a, L, o) in lat and (b, L, o) in lat}
    if not vals:
        return [f"{title}: no paired ok cells"]
    body = ", ".join(f"L{L}/O{o}: {v:.2f}{unit}" for (L, o), v in sorted(vals.items()))
    line = f"{title}: min {min(vals.values()):.2f}{unit} max {max(vals.values()):.2f}{unit} ({body})"
    if target is not None:
        met = all(v >= target for v in vals.values()) if unit == "x" else all(v <= target for v in vals.values())
        line += f"  target {'>=' if unit == 'x' else '<='} {target}{unit}: {'MET' if met else 'NOT MET'}"
    return [line]
