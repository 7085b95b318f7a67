"""The reporting stage: Figures 6-8, a per-geometry floor view and results/REPORT.md, from results/ alone.

One module per figure, each `render(results, out_dir)` -> [png, pdf]; `python -m plots` runs them all.
"""
