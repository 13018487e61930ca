"""stackbench.kernels component."""
