"""Kernel tree definitions and the one-time unpack of a Debian linux-source package."""

from __future__ import annotations

import io
import tarfile
import threading

import pytest
from helpers.kernelkit import require_kernel_tools, use_kernel_cache

from stackbench import proc
from stackbench.errors import InputError, NotFoundError
from stackbench.kernels import trees

DEBIAN_GITIGNORE = """\
# Normal rules
.*
!.gitignore
*.o
/vmlinux

#
# Debian packaging: ignore everything at the top level, since it isn't
# included in our repository
#
/*
!/debian/
"""


def test_shipped_tree_loads():
    t = trees.load_tree("linux-6.1")
    assert t.source_kind == "debian-package"
    assert t.source == "linux-source-6.1"
    assert t.default_base == "v6.1-debian"
    assert "linux-6.1" in [x.name for x in trees.list_trees()]


def test_unknown_tree():
    with pytest.raises(NotFoundError, match="no kernel tree named 'nope'.*linux-6.1"):
        trees.load_tree("nope")


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: bad\nsource: {git: x}\n", "default_base"),
        ("name: bad\nsource: {git: x, path: /y}\ndefault_base: m\n", "source"),
        ("name: bad\nsource: {svn: x}\ndefault_base: m\n", "source"),
        ("name: bad\nsource: {git: x}\ndefault_base: m\nextra: 1\n", "extra"),
        ("name: other\nsource: {git: x}\ndefault_base: m\n", "does not match the file name"),
        ("name: bad\nsource: [unclosed\n", "not valid YAML"),
    ],
)
def test_invalid_tree_files_name_the_file(tmp_path, monkeypatch, text, message):
    (tmp_path / "bad.yaml").write_text(text)
    monkeypatch.setenv("STACKBENCH_TREES", str(tmp_path))
    with pytest.raises(InputError, match=message) as exc:
        trees.load_tree("bad")
    assert str(tmp_path / "bad.yaml") in str(exc.value)


def test_user_tree_dir_overrides(tmp_path, monkeypatch):
    (tmp_path / "mine.yaml").write_text("name: mine\nsource: {path: /srv/linux}\ndefault_base: x\n")
    monkeypatch.setenv("STACKBENCH_TREES", str(tmp_path))
    t = trees.load_tree("mine")
    assert (t.source_kind, t.source) == ("path", "/srv/linux")


def test_cut_debian_gitignore(tmp_path):
    gi = tmp_path / ".gitignore"
    gi.write_text(DEBIAN_GITIGNORE)
    assert trees.cut_debian_gitignore(gi)
    text = gi.read_text()
    assert "/*" not in text.splitlines()
    assert "!/debian/" not in text
    assert "*.o" in text and "/vmlinux" in text
    assert not trees.cut_debian_gitignore(gi)  # nothing left to cut


def _fake_source_tarball(path, version=("6", "1", "99")):
    buf = io.BytesIO()
    files = {
        "linux-source-6.1/Makefile": "VERSION = {}\nPATCHLEVEL = {}\nSUBLEVEL = {}\n"
        "EXTRAVERSION =\n".format(*version),
        "linux-source-6.1/.gitignore": DEBIAN_GITIGNORE,
        "linux-source-6.1/mm/compaction.c": "int compaction;\n",
        "linux-source-6.1/README": "Linux kernel\n",
    }
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())


@pytest.fixture
def fake_debian(tmp_path, monkeypatch):
    src = tmp_path / "usr-src"
    src.mkdir()
    _fake_source_tarball(src / "linux-source-6.1.tar.xz")
    monkeypatch.setattr(trees, "DEBIAN_SRC", src)
    monkeypatch.setenv("STACKBENCH_KERNEL_CACHE", str(tmp_path / "cache"))
    return src


def test_ensure_repo_unpacks_once_into_git(fake_debian):
    t = trees.load_tree("linux-6.1")
    repo = trees.ensure_repo(t)
    files = proc.run(["git", "-C", repo, "ls-files"]).stdout.split()
    # the top-level files are committed: Debian's "/*" block was cut
    assert {"Makefile", "README", "mm/compaction.c", ".gitignore"} <= set(files)
    sha = trees.resolve(repo, "v6.1-debian")
    assert len(sha) == 40
    subject = proc.run(["git", "-C", repo, "log", "-1", "--format=%s", sha]).stdout.strip()
    assert subject == "Linux 6.1.99 from Debian linux-source-6.1"
    # present: never unpacked again, even without the package
    (fake_debian / "linux-source-6.1.tar.xz").unlink()
    assert trees.ensure_repo(t) == repo
    assert trees.resolve(repo, "v6.1-debian") == sha


def test_ensure_repo_concurrent_callers_unpack_once(fake_debian, monkeypatch):
    calls = []
    real = trees._unpack_debian

    def counting(tree, repo):
        calls.append(repo)
        real(tree, repo)

    monkeypatch.setattr(trees, "_unpack_debian", counting)
    t = trees.load_tree("linux-6.1")
    out, errors = [], []

    def worker():
        try:
            out.append(trees.ensure_repo(t))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert len(calls) == 1
    assert len(set(out)) == 1


def test_deterministic_base_sha(fake_debian, tmp_path, monkeypatch):
    """The same package gives the same base commit on another machine (another cache)."""
    t = trees.load_tree("linux-6.1")
    first = trees.resolve(trees.ensure_repo(t), "v6.1-debian")
    monkeypatch.setenv("STACKBENCH_KERNEL_CACHE", str(tmp_path / "cache2"))
    second = trees.resolve(trees.ensure_repo(t), "v6.1-debian")
    assert first == second


def test_missing_package_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(trees, "DEBIAN_SRC", tmp_path)
    monkeypatch.setenv("STACKBENCH_KERNEL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(Exception, match="install the Debian package linux-source-6.1"):
        trees.ensure_repo(trees.load_tree("linux-6.1"))
    assert not (tmp_path / "cache" / "trees" / "linux-6.1").exists()


def test_unknown_ref(fake_debian):
    repo = trees.ensure_repo(trees.load_tree("linux-6.1"))
    with pytest.raises(NotFoundError, match="unknown base ref 'v9.9'"):
        trees.resolve(repo, "v9.9")


@pytest.mark.slow
def test_real_debian_tree(monkeypatch):
    require_kernel_tools()
    use_kernel_cache(monkeypatch)
    repo = trees.ensure_repo(trees.load_tree("linux-6.1"))
    sha = trees.resolve(repo, "v6.1-debian")
    listed = proc.run(["git", "-C", repo, "ls-tree", "--name-only", sha]).stdout.split()
    assert {"Makefile", "mm", "scripts", "Kconfig"} <= set(listed)
