"""What the test files of several rooms share: stored series, pages and runs (web), a tiny
kernel tree and a running dispatcher (lifecycle), the one intake (intake), the cached test
kernel (kernelkit), a VM playing a bare-metal box (boxvm), public-inbox archives and list
mail (pubinbox, listmail), LKP and mmtests result trees (lkp_tree, mmtests_synth) and a
flaky TCP proxy (flakyproxy). Fixtures come in through ``pytest_plugins = ["helpers.web"]``
and the like; tests/conftest.py keeps the database fixtures every room uses."""
