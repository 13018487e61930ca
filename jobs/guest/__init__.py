"""stackbench.jobs.guest: the in-guest runner and the initramfs that carries it."""
