"""Every experiment through one entry point, `python -m sweeps.run` (sweeps/README.md)."""
