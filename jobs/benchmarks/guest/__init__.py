"""stackbench.jobs.benchmarks.guest: the in-guest runner and the initramfs that carries it."""
