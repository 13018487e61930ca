from stackbench.cli import entry

entry()
