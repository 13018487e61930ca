"""stackbench.jobs component."""
