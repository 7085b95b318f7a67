"""Path display names and colours (the one place), the Agg backend, and saving a figure as PNG + PDF.

Every figure draws a path with the same name and colour, so a reader can follow one system across
Figures 6-8. Each drawn series carries a gid "series:<path>" so tests can count what was really drawn.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: the reporting stage runs on any machine
import matplotlib.pyplot as plt  # noqa: E402

# path -> (display name, colour). Framework FullState paths are saturated, replay paths their light tint, the
# paper-mode FullState paths (one persistent pool, an explicit state copy per step) their dark shade.
PATH_STYLE: dict[str, tuple[str, str]] = {
    "onela": ("OneLA", "#c62828"),
    "controlled_fullstate": ("Controlled FullState", "#616161"),
    "vllm_fullstate": ("vLLM FullState", "#1565c0"),
    "vllm_prefix_replay": ("vLLM prefix-cache replay", "#90caf9"),
    "sglang_fullstate": ("SGLang FullState", "#2e7d32"),
    "sglang_replayssm": ("SGLang ReplaySSM", "#a5d6a7"),
    "flashinfer_fullstate": ("FlashInfer FullState", "#6a1b9a"),
    "trtllm_fullstate": ("TRT-LLM FullState", "#ef6c00"),
    "controlled_fullstate_paper": ("Controlled FullState (paper: explicit state copy)", "#212121"),
    "vllm_fullstate_paper": ("vLLM FullState (paper: explicit state copy)", "#0d47a1"),
    "sglang_fullstate_paper": ("SGLang FullState (paper: explicit state copy)", "#1b5e20"),
    "flashinfer_fullstate_paper": ("FlashInfer FullState (paper: explicit state copy)", "#4a148c"),
    "trtllm_fullstate_paper": ("TRT-LLM FullState (paper: explicit state copy)", "#bf360c"),
    "reference_fullstate": ("Reference FullState (torch)", "#8d6e63"),
    "reference_replay": ("Reference replay (torch)", "#bcaaa4"),
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


def display_name(path: str) -> str:
    return PATH_STYLE.get(path, (path, None))[0]


def colour(path: str) -> str:
    return PATH_STYLE.get(path, (None, "#9e9e9e"))[1]


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
