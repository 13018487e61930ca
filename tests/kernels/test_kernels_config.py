"""Config fragments: parsing, the shipped tiny-guest content, merging on the real tree."""

from __future__ import annotations

import os
import shutil

import pytest
from helpers.kernelkit import require_kernel_tools, use_kernel_cache

from stackbench.errors import InputError, NotFoundError
from stackbench.kernels import build, config, trees

# what the guest and the benchmarks cannot do without
REQUIRED = {
    "CONFIG_64BIT": "y",
    "CONFIG_SMP": "y",
    "CONFIG_SERIAL_8250_CONSOLE": "y",
    "CONFIG_BLK_DEV_INITRD": "y",
    "CONFIG_DEVTMPFS": "y",
    "CONFIG_PROC_FS": "y",
    "CONFIG_SYSFS": "y",
    "CONFIG_TMPFS": "y",
    "CONFIG_COMPACTION": "y",
    "CONFIG_MIGRATION": "y",
    "CONFIG_TRANSPARENT_HUGEPAGE": "y",
    "CONFIG_HUGETLBFS": "y",
    "CONFIG_VM_EVENT_COUNTERS": "y",
    "CONFIG_ADVISE_SYSCALLS": "y",
    "CONFIG_MODULES": "y",
    "CONFIG_MODULE_UNLOAD": "y",
    "CONFIG_VIRTIO_PCI": "y",
    "CONFIG_VIRTIO_CONSOLE": "y",
    "CONFIG_PANIC_ON_OOPS": "y",
    "CONFIG_HW_RANDOM": "n",
    "CONFIG_KERNEL_XZ": "n",
}


def test_tiny_guest_fragment_has_what_the_guest_needs():
    frag = config.parse_fragment(config.fragment_path("tiny-guest"))
    missing = {k: v for k, v in REQUIRED.items() if frag.get(k) != v}
    assert not missing


def test_unknown_config_name():
    with pytest.raises(NotFoundError, match="no kernel config fragment named 'huge'.*tiny-guest"):
        config.fragment_path("huge")
    with pytest.raises(InputError, match="not a valid config name"):
        config.fragment_path("../etc/passwd")


def test_bad_fragment_line_is_named(tmp_path):
    frag = tmp_path / "x.config"
    frag.write_text("CONFIG_A=y\n# comment\nCONFIG_B is on\n")
    with pytest.raises(InputError, match=r"x.config:3: not a config line: 'CONFIG_B is on'"):
        config.parse_fragment(frag)


def test_parse_fragment_values(tmp_path):
    frag = tmp_path / "x.config"
    frag.write_text('CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C="str"\nCONFIG_D=42\n')
    assert config.parse_fragment(frag) == {
        "CONFIG_A": "y",
        "CONFIG_B": "n",
        "CONFIG_C": '"str"',
        "CONFIG_D": "42",
    }


def test_find_mismatches():
    wanted = {"CONFIG_A": "y", "CONFIG_B": "n", "CONFIG_C": "y"}
    final = {"CONFIG_A": "y", "CONFIG_C": "n"}
    assert config.find_mismatches(wanted, final) == ["CONFIG_C=y requested, got unset"]


def test_install_keeps_timestamp_when_unchanged(tmp_path):
    gen = tmp_path / "gen.config"
    gen.write_text("CONFIG_A=y\n")
    obj = tmp_path / "obj"
    assert config.install(gen, obj)
    target = obj / ".config"
    os.utime(target, (1000, 1000))
    assert not config.install(gen, obj)
    assert target.stat().st_mtime == 1000
    gen.write_text("CONFIG_A=n\n")
    assert config.install(gen, obj)
    assert target.read_text() == "CONFIG_A=n\n"


def test_config_hash_is_content_hash(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("CONFIG_A=y\n")
    b.write_text("CONFIG_A=y\n")
    assert config.config_hash(a) == config.config_hash(b)
    b.write_text("CONFIG_A=n\n")
    assert config.config_hash(a) != config.config_hash(b)


@pytest.fixture
def real_src(monkeypatch):
    """The base commit checked out in the shared workspace, held for the test."""
    require_kernel_tools()
    use_kernel_cache(monkeypatch)
    tree = trees.load_tree("linux-6.1")
    repo = trees.ensure_repo(tree)
    with build.workspace("linux-6.1", "tiny-guest") as ws:
        build.checkout(repo, ws / "src", trees.resolve(repo, tree.default_base))
        yield ws / "src"


@pytest.mark.slow
def test_generate_on_real_tree_is_stable_and_honoured(real_src, tmp_path):
    env = build.build_env()
    first = config.generate(real_src, tmp_path / "k1", "tiny-guest", env=env)
    h1 = config.config_hash(first)
    second = config.generate(real_src, tmp_path / "k2", "tiny-guest", env=env)
    assert config.config_hash(second) == h1
    final = config.parse_config(first)
    assert config.find_mismatches(REQUIRED, final) == []
    # tinyconfig is the base: things nobody asked for stay off
    assert final.get("CONFIG_NET", "n") == "n"
    assert final.get("CONFIG_BLOCK", "n") == "n"


@pytest.mark.slow
def test_fragment_the_kernel_cannot_honour(real_src, tmp_path, monkeypatch):
    confdir = tmp_path / "configs"
    confdir.mkdir()
    shutil.copy(config.fragment_path("tiny-guest"), confdir / "broken.config")
    with open(confdir / "broken.config", "a") as fh:
        fh.write("CONFIG_STACKBENCH_NO_SUCH_SYMBOL=y\n")
    monkeypatch.setattr(config, "CONFIGS_DIR", confdir)
    with pytest.raises(config.ConfigError, match="CONFIG_STACKBENCH_NO_SUCH_SYMBOL=y requested"):
        config.generate(real_src, tmp_path / "k", "broken", env=build.build_env())
