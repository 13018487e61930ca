"""stackbench.jobs: benchmark jobs from their definitions to the nightly run, in rooms
(lowest first): benchmarks, executors, driver, tracking, lists.
Each room's ``__init__`` says what it owns and which rooms it may import;
tests/project/test_component_map.py checks the arrows."""
