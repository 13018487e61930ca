"""Tracked branches over time: the nightly run of each tracked branch (nightly,
``tracked/``, tracked_branches), its history and change points (history), the nightly
A/A (nightly_aa), and the bisect of a regression (bisect, bisect_runner) on kernels
measured the way a series' are (lab). It may import benchmarks, executors and
driver."""
