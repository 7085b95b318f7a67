"""Path display names and colours (the one place), the Agg backend, and saving a figure as PNG + PDF.

Every figure draws a path with the same name and colour, so a reader can follow one system across
Figures 6-8. Each drawn series carries a gid "series:<path>" so tests can count what was really drawn.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: the reporting stage runs on any machine
import matplotlib.pyplot as plt  # noqa: E402

# The FullState systems, each registered in two maintenance modes (docs/methods.md §4): the paper's mode
# (path `<system>_paper`: one persistent pool, an explicit per-step copy of the parents' states) and the index mode
# (path `<system>`: two pools, the parent's state read through an index). One naming rule for all: the paper's
# mode carries the paper's name, the index mode the same name + INDEX_LABEL; both take the system's colour, and the
# index mode is hatched (INDEX_HATCH). The paper's numbers pair only with the paper's mode (plots/reproduced.py).
FULLSTATE_SYSTEMS: dict[str, tuple[str, str]] = {
    "controlled_fullstate": ("Controlled FullState", "#616161"),
    "vllm_fullstate": ("vLLM FullState", "#1565c0"),
    "sglang_fullstate": ("SGLang FullState", "#2e7d32"),
    "flashinfer_fullstate": ("FlashInfer FullState", "#6a1b9a"),
    "trtllm_fullstate": ("TRT-LLM FullState", "#ef6c00"),
    "fla_fullstate": ("fla FullState", "#00838f"),
}
# FullState systems the paper does not compare against: no paper value pairs with them. Figures 7 and 8 keep a slot
# for each in both modes ("not measured yet" while it has no row) and REPORT.md lists their numbers in a section
# of their own (plots/report.py), never in a paper claim.
NOT_IN_PAPER: tuple[str, ...] = ("fla_fullstate",)
# Fig 6's native framework references: end-to-end beam search in a framework's own engine, beside this project's
# decode pipeline (plots.reproduced.native_table). The paper's is vLLM's engine, which cannot run beside the GPU
# host's torch, so its slot is a named skip (NATIVE_SKIPS; docs/methods.md §5); transformers' generate is measured by
# tools.hf_generate (stock, and with OneLA inside it). path -> (display name, colour).
NATIVE: dict[str, tuple[str, str]] = {
    "hf_generate": ("transformers generate (stock)", "#546e7a"),
    "hf_generate_onela": ("transformers generate + OneLA", "#ef9a9a"),
    "vllm_engine": ("vLLM engine (LLM.beam_search)", "#bbdefb"),
}
NATIVE_STOCK, NATIVE_ONELA = "hf_generate", "hf_generate_onela"
# path -> (the few words its figure slot shows, the reason in full)
NATIVE_SKIPS: dict[str, tuple[str, str]] = {
    "vllm_engine": ("not run: torch 2.14 pin", "vLLM 0.33 pins torch 2.14; the project runs torch 2.11 "
                                                "(docs/methods.md §5)")}
NATIVE_COMMAND = "python -m tools.hf_generate"
# generate's wall time per decode call (Python overhead and beam selection included), drawn over a native bar
WALL_MARKER = dict(marker="_", s=160, color="black", linewidths=2.0, zorder=6)
PAPER_SUFFIX = "_paper"
INDEX_LABEL = " (index mode)"
INDEX_HATCH = "////"
PAPER_MODE, INDEX_MODE = "paper", "index"


def mode_path(system: str, mode: str = PAPER_MODE) -> str:
    """The path that runs `system` (a paper system name, e.g. "vllm_fullstate") in `mode`: a FullState system's
    `<system>_paper` path in the paper's mode, its `<system>` path in the index mode; any other system is its own
    path in both."""
    return system + PAPER_SUFFIX if mode == PAPER_MODE and system in FULLSTATE_SYSTEMS else system


def system_of(path: str) -> str:
    """The paper system a path runs: a paper-mode FullState path's system, else the path itself."""
    base = path.removesuffix(PAPER_SUFFIX)
    return base if base in FULLSTATE_SYSTEMS else path


def mode_of(path: str) -> str | None:
    """PAPER_MODE or INDEX_MODE for a FullState path, None for any other path."""
    if system_of(path) not in FULLSTATE_SYSTEMS:
        return None
    return PAPER_MODE if path.endswith(PAPER_SUFFIX) else INDEX_MODE


def partner(path: str) -> str | None:
    """The same FullState system in the other mode; None for a path that is not a FullState path."""
    mode = mode_of(path)
    if mode is None:
        return None
    return mode_path(system_of(path), INDEX_MODE if mode == PAPER_MODE else PAPER_MODE)


def _fullstate(system: str) -> dict[str, tuple[str, str]]:
    """A FullState system's two paths, the paper's mode first, by the one naming rule."""
    name, col = FULLSTATE_SYSTEMS[system]
    return {mode_path(system, PAPER_MODE): (name, col), mode_path(system, INDEX_MODE): (name + INDEX_LABEL, col)}


# path -> (display name, colour), in the order every figure and table lists paths: each FullState system's index
# mode right after its paper mode; replay paths take their framework's light tint.
PATH_STYLE: dict[str, tuple[str, str]] = {
    "onela": ("OneLA", "#c62828"),
    **_fullstate("controlled_fullstate"),
    **_fullstate("vllm_fullstate"),
    "vllm_prefix_replay": ("vLLM prefix-cache replay", "#90caf9"),
    **_fullstate("sglang_fullstate"),
    "sglang_replayssm": ("SGLang ReplaySSM", "#a5d6a7"),
    **_fullstate("flashinfer_fullstate"),
    **_fullstate("trtllm_fullstate"),
    **_fullstate("fla_fullstate"),
    "reference_fullstate": ("Reference FullState (torch)", "#8d6e63"),
    "reference_replay": ("Reference replay (torch)", "#bcaaa4"),
    **{p: (NATIVE[p][0], NATIVE[p][1]) for p in NATIVE},
}
PATH_ORDER = list(PATH_STYLE)
REFERENCE_PATHS = ("reference_fullstate", "reference_replay")
PAPER_MARKER = dict(marker="D", s=28, facecolor="white", edgecolor="black", linewidth=1.0, zorder=5)
MIB = 2 ** 20


def short(v: float) -> str:
    """A bar label: three significant digits, thousands written out (2,048 rather than 2.05e+03)."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def plain_log(ax) -> None:
    """Log y axis with tick labels as plain numbers (0.1, 2, 300) instead of 3x10^-1."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    ax.set_yscale("log")
    fmt = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(fmt)
    lo, hi = ax.get_ylim()
    ax.yaxis.set_minor_formatter(fmt if hi / lo < 30 else NullFormatter())


def paper_handle():
    """Legend handle for PAPER_MARKER."""
    from matplotlib.lines import Line2D
    return Line2D([], [], linestyle="", marker="D", markersize=6, markerfacecolor="white", markeredgecolor="black")


def path_handle(path: str):
    """Legend handle of a path's bars or boxes (its colour, hatched in the index mode), whether or not it drew any."""
    from matplotlib.patches import Patch
    return Patch(facecolor=colour(path), edgecolor="black", linewidth=0.4, hatch=hatch(path))


def display_name(path: str) -> str:
    return PATH_STYLE.get(path, (path, None))[0]


def colour(path: str) -> str:
    return PATH_STYLE.get(path, (None, "#9e9e9e"))[1]


def hatch(path: str) -> str | None:
    """INDEX_HATCH for an index-mode FullState path (same colour as its paper mode), None for every other path."""
    return INDEX_HATCH if mode_of(path) == INDEX_MODE else None


def not_in_paper_paths() -> list[str]:
    """Both modes' paths of every NOT_IN_PAPER system, the paper's mode first."""
    return [p for s in NOT_IN_PAPER for p in (mode_path(s, PAPER_MODE), mode_path(s, INDEX_MODE))]


def with_partners(paths) -> list[str]:
    """`paths` plus the paper-mode partner of each index-mode FullState path among them, in the canonical order:
    a figure keeps a slot for the paper's mode beside the index mode, saying "not measured yet" when it has no
    row, so the paper's value is never drawn against the index mode."""
    paths = set(paths)
    return ordered(paths | {partner(p) for p in paths if mode_of(p) == INDEX_MODE})


def ordered(paths) -> list[str]:
    """Paths in the canonical order (unknown names last, alphabetically)."""
    paths = set(paths)
    known = [p for p in PATH_ORDER if p in paths]
    return known + sorted(paths - set(known))


def mark_series(artists, path: str) -> None:
    for a in artists:
        a.set_gid(f"series:{path}")


def setup() -> None:
    plt.rcParams.update({
        "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9,
        "xtick.labelsize": 9, "ytick.labelsize": 9, "axes.spines.top": False, "axes.spines.right": False,
        "figure.dpi": 110, "savefig.dpi": 160, "pdf.fonttype": 42,
    })


def no_data(ax, message: str) -> None:
    """Say on the figure itself that there is nothing to draw yet (never an empty-looking plot)."""
    ax.text(0.5, 0.5, f"no data yet\n{message}", ha="center", va="center", transform=ax.transAxes,
            fontsize=11, color="#555555", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def save(fig, out_dir: str | Path, stem: str) -> list[Path]:
    """Write <stem>.png and <stem>.pdf without timestamps, so regenerating unchanged data changes no file."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png, pdf = out_dir / f"{stem}.png", out_dir / f"{stem}.pdf"
    fig.savefig(png, bbox_inches="tight", metadata={"Software": None})
    fig.savefig(pdf, bbox_inches="tight", metadata={"CreationDate": None, "Creator": None, "Producer": None})
    plt.close(fig)
    return [png, pdf]
