"""stackbench.patches component."""
