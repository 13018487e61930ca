"""stackbench: benchmark-and-regression CI for Linux memory-management patch stacks."""

__version__ = "0.1.0"
