"""The paper's numbers (docs/design.md §7, from paper §4.2-4.4), as data with their source.

These are the only hard-coded figures in plots/: they are what the paper reports, drawn beside ours and
compared in results/REPORT.md. "ours" is always computed from results/ (plots/report.py). A few numbers
the paper's text gives beyond docs/design.md §7's table are included and marked `in_design=False`.
"""
from __future__ import annotations

from dataclasses import dataclass

# The cells the paper names (paper §4.1, §4.3, §4.4). Geometry as (HK, HV, K, V) columns.
QWEN = dict(HK=16, HV=16, K=128, V=128)
FIG6_CELL = dict(R=4, W=256)                   # full model, prompts 1K / 5K, O = 3-7
FIG7_LARGEST_QWEN = dict(R=16, W=512, **QWEN)  # "the largest Qwen geometry" in the operator suite
FIG8_CELL = dict(R=4, W=512, **QWEN)           # recurrent path, traffic
FIG6_PROMPTS = (1024, 5120)
# Our Fig 7 baselines, in the paper's order, by system name: a FullState system pairs with the paper through its
# paper-mode path `<system>_paper` (plots.style.mode_path), its index mode `<system>` shown beside. vLLM prefix-cache
# replay stands where the paper's vLLM ReplaySSM stood, but is not it (NO_KERNEL): it is drawn and reported beside
# the paper's number, never paired with it.
FIG7_BASELINES = ("vllm_fullstate", "sglang_fullstate", "vllm_prefix_replay", "sglang_replayssm",
                  "flashinfer_fullstate", "trtllm_fullstate")
# A paper system no released framework provides for GDN: why, and the path shown beside its numbers (not paired).
NO_KERNEL = {"vllm_replayssm": ("no released vLLM has a GDN ReplaySSM kernel (vLLM 0.33's ReplaySSM is "
                                "Mamba2-only); vLLM's prefix-cache replay shown beside, not paired",
                                "vllm_prefix_replay")}
# The paper's ReplaySSM kernel as released for GDN: SGLang's port of the same decode kernel.
REPLAYSSM_KERNEL = "sglang_replayssm"


@dataclass(frozen=True)
class PaperNumber:
    key: str        # what plots/report.py computes "ours" for
    where: str      # figure panel
    quantity: str
    text: str       # the number as the paper prints it
    unit: str       # "x", "%", "ms", "MiB", "FLOP/B", "" (absolute error)
    source: str
    in_design: bool = True

    @property
    def value(self) -> float:
        return float(self.text)


S42, S43, S44 = "paper §4.2", "paper §4.3", "paper §4.4"

NUMBERS: list[PaperNumber] = [
    PaperNumber("fig6.speedup_vs_controlled.min", "Fig 6", "full-model decode-forward, OneLA vs Controlled "
                "FullState (R=4 W=256, prompt 1K/5K, O=3-7), smallest speedup", "1.54", "x", S42),
    PaperNumber("fig6.speedup_vs_controlled.max", "Fig 6", "same, largest speedup", "2.46", "x", S42),
    PaperNumber("fig6.controlled_vs_vllm.min", "Fig 6", "|Controlled FullState - vLLM FullState| / vLLM "
                "FullState, smallest", "6.9", "%", S42),
    PaperNumber("fig6.controlled_vs_vllm.max", "Fig 6", "same, largest", "9.3", "%", S42),
    *[PaperNumber(f"fig7a.median_speedup.{p}", "Fig 7a", f"median latency speedup over {name}", v, "x", S43)
      for p, name, v in (("vllm_fullstate", "vLLM FullState", "40.5"),
                         ("sglang_fullstate", "SGLang FullState", "42.5"),
                         ("vllm_replayssm", "vLLM ReplaySSM", "17.5"),
                         ("sglang_replayssm", "SGLang ReplaySSM", "17.5"),
                         ("flashinfer_fullstate", "FlashInfer", "41.5"),
                         ("trtllm_fullstate", "TRT-LLM", "46.3"))],
    PaperNumber("fig7a.onela_largest_qwen.O3", "Fig 7a", "OneLA latency, R=16 W=512 HK=HV=16 K=V=128, O=3",
                "0.212", "ms", S43),
    PaperNumber("fig7a.onela_largest_qwen.O7", "Fig 7a", "same, O=7", "0.990", "ms", S43),
    PaperNumber("fig7a.speedup_largest_qwen.min", "Fig 7a", "speedup over the baselines supporting that shape "
                "(O=3 and O=7), smallest", "16.0", "x", S43, in_design=False),
    PaperNumber("fig7a.speedup_largest_qwen.max", "Fig 7a", "same, largest", "56.5", "x", S43, in_design=False),
    PaperNumber("fig7.max_abs_err", "Fig 7", "OneLA max |o - o_FP32 FullState| over the operator suite (405 "
                "shapes)", "4.88e-4", "", S43),
    PaperNumber("fig7b.max_median_capacity_reduction", "Fig 7b", "median persistent-capacity reduction, "
                "largest over the baselines (\"up to\")", "42.5", "x", S43),
    *[PaperNumber(f"fig8a.latency.{p}.O{o}", "Fig 8a", f"recurrent-path latency, R=4 W=512 Qwen, {name}, O={o}",
                  v, "ms", S44)
      for o, vals in ((3, ("0.0755", "1.20", "3.00")), (7, ("0.308", "4.06", "10.9")))
      for (p, name), v in zip((("onela", "OneLA"), ("vllm_replayssm", "vLLM ReplaySSM"),
                               ("vllm_fullstate", "vLLM FullState")), vals)],
    PaperNumber("fig8a.reduction_vs_fullstate.O3", "Fig 8a", "vLLM FullState / OneLA latency, O=3", "39.7", "x",
                S44, in_design=False),
    PaperNumber("fig8a.reduction_vs_fullstate.O7", "Fig 8a", "same, O=7", "35.4", "x", S44, in_design=False),
    PaperNumber("fig8b.capacity.onela.O3", "Fig 8b", "OneLA persistent recurrent-state capacity, O=3", "36.3",
                "MiB", S44),
    PaperNumber("fig8b.capacity.onela.O7", "Fig 8b", "same, O=7", "101", "MiB", S44),
    PaperNumber("fig8b.capacity_reduction_vs_fullstate.O3", "Fig 8b", "vLLM FullState / OneLA capacity, O=3",
                "56.5", "x", S44),
    PaperNumber("fig8b.capacity_reduction_vs_fullstate.O7", "Fig 8b", "same, O=7", "20.3", "x", S44),
    PaperNumber("fig8b.writes.onela.O3", "Fig 8b", "OneLA recurrent-state writes, O=3", "32.3", "MiB", S44),
    PaperNumber("fig8b.writes.onela.O7", "Fig 8b", "same, O=7", "96.8", "MiB", S44),
    PaperNumber("fig8b.writes_reduction_vs_fullstate.O3", "Fig 8b", "vLLM FullState / OneLA writes, O=3", "127",
                "x", S44),
    PaperNumber("fig8b.writes_reduction_vs_fullstate.O7", "Fig 8b", "same, O=7", "127", "x", S44),
    PaperNumber("fig8c.traffic.onela.O3", "Fig 8c", "OneLA DRAM traffic (read + write), O=3", "161", "MiB", S44),
    PaperNumber("fig8c.traffic_reduction.vllm_fullstate.O3", "Fig 8c", "vLLM FullState / OneLA DRAM traffic, O=3",
                "76.9", "x", S44),
    PaperNumber("fig8c.traffic_reduction.vllm_replayssm.O3", "Fig 8c", "vLLM ReplaySSM / OneLA DRAM traffic, "
                "O=3", "39.9", "x", S44),
    PaperNumber("fig8c.ai.onela.O3", "Fig 8c", "OneLA arithmetic intensity, O=3", "40.0", "FLOP/B", S44),
    PaperNumber("fig8c.ai_gain.vllm_fullstate.O3", "Fig 8c", "OneLA / vLLM FullState arithmetic intensity, O=3",
                "45.6", "x", S44),
    PaperNumber("fig8c.ai_gain.vllm_replayssm.O3", "Fig 8c", "OneLA / vLLM ReplaySSM arithmetic intensity, O=3",
                "20.6", "x", S44),
]
BY_KEY = {n.key: n for n in NUMBERS}

# Fig 8's baseline values the paper gives only as ratios to OneLA's: (system, metric, O) -> (OneLA key, ratio key,
# "times" when baseline = OneLA x ratio, "over" when baseline = OneLA / ratio). Drawn as derived values.
_CAP, _WR, _TR = "fig8b.capacity", "fig8b.writes", "fig8c.traffic"
FIG8_DERIVED = {
    ("vllm_fullstate", "persistent_bytes", 3): (f"{_CAP}.onela.O3", f"{_CAP}_reduction_vs_fullstate.O3", "times"),
    ("vllm_fullstate", "persistent_bytes", 7): (f"{_CAP}.onela.O7", f"{_CAP}_reduction_vs_fullstate.O7", "times"),
    ("vllm_fullstate", "written_bytes", 3): (f"{_WR}.onela.O3", f"{_WR}_reduction_vs_fullstate.O3", "times"),
    ("vllm_fullstate", "written_bytes", 7): (f"{_WR}.onela.O7", f"{_WR}_reduction_vs_fullstate.O7", "times"),
    ("vllm_fullstate", "dram_bytes", 3): (f"{_TR}.onela.O3", f"{_TR}_reduction.vllm_fullstate.O3", "times"),
    ("vllm_replayssm", "dram_bytes", 3): (f"{_TR}.onela.O3", f"{_TR}_reduction.vllm_replayssm.O3", "times"),
}


def value(key: str) -> float:
    return BY_KEY[key].value


def fig8_paper_value(system: str, metric: str, O: int) -> tuple[float, bool] | None:
    """The paper's Fig 8 value of `system` (a paper system name) for `metric` ("latency_ms", "persistent_bytes" /
    "written_bytes" / "dram_bytes" in MiB) at O, and whether it is derived from the paper's ratios; None if the
    paper gives none."""
    direct = {"latency_ms": f"fig8a.latency.{system}.O{O}", "persistent_bytes": f"fig8b.capacity.{system}.O{O}",
              "written_bytes": f"fig8b.writes.{system}.O{O}", "dram_bytes": f"fig8c.traffic.{system}.O{O}"}
    if direct.get(metric) in BY_KEY:
        return value(direct[metric]), False
    d = FIG8_DERIVED.get((system, metric, O))
    if d is None:
        return None
    base, ratio, how = d
    return (value(base) * value(ratio) if how == "times" else value(base) / value(ratio)), True
