"""What the test files of several rooms share: stored series, pages and runs and the web app
(web), a series whose claims are checked (claims), the CLI run in-process (cli), a tiny
kernel tree, a running dispatcher and waiting on it (lifecycle), the one intake (intake),
the cached test kernel and the tiny guest booted on it (kernelkit), a VM playing a
bare-metal box (boxvm), a small repository for the patch tests (patchrepo), public-inbox
archives and list mail (pubinbox, listmail), LKP and mmtests result trees (lkp_tree,
mmtests_synth) and a flaky TCP proxy (flakyproxy). Fixtures come in through
``pytest_plugins = ["helpers.web"]`` and the like; tests/conftest.py keeps the database
fixtures every room uses."""
