"""The real ``lkp ncompare`` beside ``stackbench compare --style lkp``, on the trees of
test_lkp_real_trees: the real ``sbin/unite-stats`` writes each commit's matrix.json (checked
against tests/lkp_tree.py), ``bin/merge-remote-result`` indexes the tree, ``sbin/ncompare -a``
and ``-m`` print the tables, and stackbench must print the same bytes.

lkp-tests hard-codes /lkp/result, /lkp/data and /lkp/paths; it runs chrooted in a private
mount namespace (``unshare -m``) on a tmpfs root with the host's /usr, /etc, /tmp... bound
in and a scratch directory bound on /lkp, so the host's / is left alone. Skipped, with the
reason, without root, unshare, Debian's ruby or ../shared/upstream/lkp-tests.bundle.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import SHARED
from helpers import lkp_tree
from helpers.cli import cli
from test_lkp_real_trees import A, B, incomplete_runs, runs_a, runs_b

BUNDLE = SHARED / "upstream" / "lkp-tests.bundle"
# mount a root of our own and run the command in it, /lkp being $1
CHROOT = r"""
set -e
mount --make-rprivate /
R=$(mktemp -d "$2/root.XXXXXX")
mount -t tmpfs tmpfs "$R"
for d in usr etc tmp proc dev sys var root; do
  [ -d "/$d" ] || continue
  mkdir -p "$R/$d"; mount --rbind "/$d" "$R/$d"
done
for l in bin sbin lib lib64; do
  if [ -L "/$l" ]; then ln -s "$(readlink "/$l")" "$R/$l"
  elif [ -d "/$l" ]; then mkdir -p "$R/$l"; mount --rbind "/$l" "$R/$l"; fi
done
mkdir -p "$R/lkp"; mount --bind "$1" "$R/lkp"
shift 2
exec chroot "$R" "$@"
"""


def _missing() -> str | None:
    if not BUNDLE.exists():
        return f"{BUNDLE} is absent (../shared is not beside the project)"
    if os.geteuid() != 0:
        return "running lkp-tests needs root for a private mount namespace"
    for tool in ("unshare", "ruby", "git", "chroot"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    return None


@pytest.fixture(scope="module")
def lkp_src(tmp_path_factory) -> Path:
    if reason := _missing():
        pytest.skip(reason)
    src = tmp_path_factory.mktemp("lkp") / "lkp-tests"
    subprocess.run(["git", "clone", "-q", "--branch", "pinned", str(BUNDLE), str(src)], check=True)
    return src


def _in_lkp(lkp_src: Path, scratch: Path, script: str) -> subprocess.CompletedProcess:
    argv = ["unshare", "-m", "sh", "-c", CHROOT, "sh", str(scratch), str(scratch.parent)]
    argv += ["env", f"LKP_SRC={lkp_src}", "sh", "-c", script]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def _real_lkp(lkp_src: Path, tmp_path: Path, commits: dict[str, list[dict]]) -> dict[str, str]:
    scratch = tmp_path / "lkp"
    result = scratch / "result"
    for commit, runs in commits.items():
        lkp_tree.write_runs(result, commit, runs)
    runs = sorted(str(p.parent.relative_to(scratch)) for p in result.rglob("stats.json"))
    unite = "".join(f"$LKP_SRC/sbin/unite-stats /lkp/{r} >/dev/null 2>&1\n" for r in runs)
    out = {}
    script = unite + "cd /tmp && $LKP_SRC/bin/merge-remote-result /lkp/result >/dev/null 2>&1\n"
    for opt in ("-a", "-m"):
        script += f"echo '@@ {opt}'; $LKP_SRC/sbin/ncompare {opt} {A} {B} 2>/dev/null\n"
    text = _in_lkp(lkp_src, scratch, script).stdout
    for part in text.split("@@ ")[1:]:
        opt, _, table = part.partition("\n")
        out[opt] = table
    # the Python builder writes what the real unite-stats wrote
    built = tmp_path / "built"
    lkp_tree.build(built, commits)
    for real in result.rglob("matrix.json"):
        mine = built / real.relative_to(result)
        want = json.loads(real.read_text())
        got = json.loads(mine.read_text())
        want["stats_source"] = [s.replace("/lkp/result", "") for s in want["stats_source"]]
        got["stats_source"] = [s.replace(str(built), "") for s in got["stats_source"]]
        assert got == want, real
    return out


@pytest.mark.conformance
@pytest.mark.parametrize("case", ["sparse", "incomplete"])
def test_stackbench_prints_what_ncompare_prints(eng, lkp_src, tmp_path, case):
    commits = {A: runs_a(), B: runs_b()} if case == "sparse" else incomplete_runs()
    real = _real_lkp(lkp_src, tmp_path, commits)
    assert "fail:runs" in real["-a"]
    tree = tmp_path / "tree"
    lkp_tree.build(tree, commits)
    rc, _, err = cli("import", "lkp", str(tree))
    assert rc == 0, err
    for opt, flag in (("-a", ["--all"]), ("-m", [])):
        rc, table, err = cli("compare", "--style", "lkp", *flag, A, B)
        assert rc == 0, err
        assert table == real[opt], opt
