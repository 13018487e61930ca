"""stackbench.web component."""
