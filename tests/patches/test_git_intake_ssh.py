"""git push over SSH: the git_intake role run against this machine (under a prefix, the
current account standing in for the `git` account), then real pushes through it.

There is no sshd here, so ``GIT_SSH`` points at a small stand-in that does what sshd does
for a key login: find the offered key in the account's authorized_keys, clear the
environment, set SSH_ORIGINAL_COMMAND, change to the home directory and run the account's
login shell (git-shell) with the key's forced command. From there everything is real:
git-shell, the role's forced command, git receive-pack, the intake hooks and the database.
"""

from __future__ import annotations

import getpass
import grp
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select
from test_ansible import local_vars, playbook_tool, run_role

ROOT = Path(__file__).resolve().parents[2]
GIT_SHELL = "/usr/bin/git-shell"
KEYS = {
    "alice": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAlicealicealicealicealicealicealicealice alice@laptop",
    "bob": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBobbobbobbobbobbobbobbobbobbobbobbobbobbob bob@desk",
}

FAKE_SSHD = '''#!{python}
"""Stands in for ssh + sshd: git runs it as  GIT_SSH HOST COMMAND  (variant 'simple')."""
import os, shlex, sys
home, shell, offered = {home!r}, {shell!r}, os.environ["FAKE_SSH_KEY"]
for line in open(os.path.join(home, ".ssh", "authorized_keys")):
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    words = shlex.split(line)  # options, then TYPE BASE64 [comment]
    options, key = words[0], " ".join(words[1:3])
    if key == " ".join(offered.split()[:2]):
        break
else:
    sys.exit("Permission denied (publickey).")
assert "no-pty" in options.split(","), options
forced = next(o for o in options.split(",") if o.startswith("command="))[len("command="):]
env = {{"HOME": home, "PATH": "/usr/bin:/bin", "SHELL": shell, "USER": "git",
       "SSH_ORIGINAL_COMMAND": sys.argv[-1]}}
os.chdir(home)
os.execve(shell, [shell, "-c", forced], env)
'''


@pytest.fixture(scope="module")
def git_shell():
    if not Path(GIT_SHELL).exists():
        pytest.skip("git-shell is not installed (Debian package git)")
    playbook_tool()
    return GIT_SHELL


def role_vars(prefix: Path, db_url: str, keys: list[dict]) -> dict:
    return {
        **local_vars(prefix),
        "stackbench_git_create_user": False,
        "stackbench_git_user": getpass.getuser(),
        "stackbench_git_group": grp.getgrgid(os.getgid()).gr_name,
        "stackbench_git_keys": keys,
        "stackbench_database_url": db_url,
        "stackbench_api_url": "https://stackbench.test",
    }


def git(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


def make_stack(path: Path) -> tuple[str, str]:
    """A tree with a base commit and two patches on it: (base, head)."""
    path.mkdir()
    ident = ["-c", "user.name=Alice Dev", "-c", "user.email=alice@example.org"]
    git(path, "init", "-q", "-b", "main")
    (path / "mm.c").write_text("int compaction = 1;\n")
    git(path, "add", "mm.c")
    git(path, *ident, "commit", "-q", "-m", "base")
    base = git(path, "rev-parse", "HEAD").stdout.strip()
    for i in (1, 2):
        (path / "mm.c").write_text(f"int compaction = {i + 1};\n")
        git(path, *ident, "commit", "-q", "-am", f"mm: compaction tweak {i}\n\nWhy {i}.")
    return base, git(path, "rev-parse", "HEAD").stdout.strip()


def test_push_over_ssh_through_git_shell_registers_a_series(git_shell, eng, db_url, tmp_path):
    from stackbench.mail import accounts
    from stackbench.resultsdb import db
    from stackbench.resultsdb.models import Series, Tree

    with db.session() as s:
        s.add(Tree(name="linux-6.1"))
        alice_id = accounts.create_user(s, "alice").id
    prefix = tmp_path / "prefix"
    keys = [{"user": u, "key": k} for u, k in KEYS.items()]
    first = run_role(tmp_path, "git_intake", role_vars(prefix, db_url, keys))
    assert "failed=0" in first
    assert "changed=0" in run_role(tmp_path, "git_intake", role_vars(prefix, db_url, keys))

    home = prefix / "var/lib/stackbench-git"
    repo = home / "intake.git"
    for hook in ("pre-receive", "post-receive"):
        # the hooks carry the database URL (password): owner only
        assert oct((repo / "hooks" / hook).stat().st_mode & 0o777) == "0o700"
    lines = [x for x in (home / ".ssh/authorized_keys").read_text().splitlines() if x[:1] != "#"]
    assert lines[0].startswith('command="stackbench-intake alice",no-pty,')

    fake = tmp_path / "fake-ssh"
    fake.write_text(FAKE_SSHD.format(python=sys.executable, home=str(home), shell=git_shell))
    fake.chmod(0o755)
    base, head = make_stack(tmp_path / "work")
    env = dict(os.environ, GIT_SSH=str(fake), GIT_SSH_VARIANT="simple", FAKE_SSH_KEY=KEYS["alice"])
    env.pop("REMOTE_USER", None)
    url = "git@stackbench.test:intake.git"

    out = git(tmp_path / "work", "push", url, f"HEAD:refs/for/linux-6.1/{base}", env=env)
    assert out.returncode == 0, out.stderr
    with db.session() as s:
        series = s.scalars(select(Series)).one()
        assert (series.source, series.owner_id, series.base_commit) == ("push", alice_id, base)
        assert [p.commit_sha for p in series.patches][-1] == head
        sid = series.id
    assert f"remote: stackbench: series {sid}: 2 patch(es) on {base}" in out.stderr
    assert f"remote: stackbench: https://stackbench.test/series/{sid}" in out.stderr

    # any other ref is refused, and nothing is registered
    out = git(tmp_path / "work", "push", url, "HEAD:refs/heads/main", env=env)
    assert out.returncode != 0
    assert "only pushes to refs/for/<tree>/<base> are accepted" in out.stderr
    # a key that is not in authorized_keys gets nowhere
    stranger = dict(env, FAKE_SSH_KEY="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIStranger x@y")
    out = git(tmp_path / "work", "push", url, f"HEAD:refs/for/linux-6.1/{base}", env=stranger)
    assert out.returncode != 0 and "Permission denied" in out.stderr
    # the forced command serves git's transport and the intake repository only
    for command in ("sh -c id", "git-receive-pack 'other.git'"):
        shell = subprocess.run(
            [str(fake), "stackbench.test", command], env=env, capture_output=True, text=True
        )
        assert shell.returncode == 128 and "stackbench:" in shell.stderr, shell.stderr
    with db.session() as s:
        assert len(s.scalars(select(Series)).all()) == 1


def test_a_bad_key_entry_stops_the_role(git_shell, tmp_path):
    bad = [{"user": "alice; rm -rf /", "key": KEYS["alice"]}]
    vars_ = role_vars(tmp_path / "prefix", "postgresql://x@y/z", bad)
    with pytest.raises(AssertionError) as err:
        run_role(tmp_path, "git_intake", vars_)
    assert "stackbench_git_keys: each entry needs user" in str(err.value)
    assert not (tmp_path / "prefix/var/lib/stackbench-git/.ssh/authorized_keys").exists()
