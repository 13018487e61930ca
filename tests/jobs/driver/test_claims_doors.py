"""Every front door opts a series in to checking its claims: the CLI's --check-claims, the
web form's box, the API's field, a push option and a list's YAML. The claims are kept with
the series and the jobs they map to join its own."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from conftest import SHARED
from helpers.web import DATA, add_token, add_tree, add_user, bearer, csrf_of, login

from stackbench.errors import StackbenchError
from stackbench.resultsdb import series_runs_store, series_store
from stackbench.resultsdb.db import session

pytest_plugins = ["helpers.web"]

# a short-form claim in the cover letter, as authors write them
CLAIM = "Two tweaks to compaction.\n\nvm-scalability results:\n  mmap-pread-seq-mt: -18.3%\n"


def _mbox(claims: bool = True) -> bytes:
    text = (DATA / "series.mbox").read_text()
    if claims:
        text = text.replace("Two tweaks to compaction.\n", CLAIM, 1)
    return text.encode()


def _meta(eng, sid: int) -> dict:
    """The series' meta with its attempt's plan (jobs, check_claims, ...) beside it."""
    with session(eng) as s:
        plan = series_runs_store.current(s, sid)
        return {**series_store.get(s, sid).meta,
                **{k: getattr(plan, k) for k in series_runs_store.PLAN}}  # fmt: skip


def _mapped(meta: dict) -> None:
    """The short form's claim kept, mapped to the vm-scalability case it names, whose job
    joined the series' own."""
    pytest.importorskip("stackbench.jobs.driver.claims_map")
    (claim,) = meta["claims"]
    assert claim["claim"]["metric"].startswith("mmap-pread-seq-mt")
    assert claim["job"] and "mmap-pread-seq-mt" in claim["job"]
    assert claim["job"] in meta["jobs"] and meta["claims_jobs"] == [claim["job"]]


def test_api_field_opts_in_and_must_be_a_boolean(eng, client):
    add_user(eng, "alice")
    add_tree(eng, "mm")
    tok = add_token(eng, "alice")
    body = {"mbox": _mbox().decode(), "tree": "mm", "jobs": ["thpscale"], "runs": 3}
    bad = client.post("/api/series", json={**body, "check_claims": "perhaps"}, headers=bearer(tok))
    assert bad.status_code == 400 and "check_claims" in bad.get_data(as_text=True)
    r = client.post("/api/series", json={**body, "check_claims": True}, headers=bearer(tok))
    assert r.status_code == 201, r.get_json()
    meta = _meta(eng, r.get_json()["id"])
    assert meta["check_claims"] is True and meta["jobs"][0] == "thpscale"
    _mapped(meta)


def test_form_box_opts_in_and_unticked_keeps_no_claims(eng, client):
    add_user(eng, "alice")
    add_tree(eng, "mm")
    login(client)
    page = client.get("/submit").get_data(as_text=True)
    assert 'name="check_claims"' in page
    form = {"csrf_token": csrf_of(client, "/submit"), "tree": "mm", "jobs": ["thpscale"],
            "runs": "1", "mbox": (io.BytesIO(_mbox()), "s.mbox"), "check_claims": "1"}  # fmt: skip
    r = client.post("/submit", data=form, content_type="multipart/form-data")
    assert r.status_code == 303, r.get_data(as_text=True)
    sid = int(r.headers["Location"].rstrip("/").rsplit("/", 1)[1])
    meta = _meta(eng, sid)
    assert meta["check_claims"] is True
    _mapped(meta)


def test_without_opting_in_nothing_is_kept(eng, client):
    add_user(eng, "alice")
    add_tree(eng, "mm")
    tok = add_token(eng, "alice")
    body = {"mbox": _mbox().decode(), "tree": "mm", "jobs": ["thpscale"], "runs": 3}
    r = client.post("/api/series", json=body, headers=bearer(tok))
    meta = _meta(eng, r.get_json()["id"])
    assert "claims" not in meta and meta["check_claims"] is False and meta["jobs"] == ["thpscale"]


def test_cli_submit_flag_opts_in(eng, tmp_path, capsys):
    from stackbench.cli import main

    add_tree(eng, "mm")
    f = tmp_path / "s.mbox"
    f.write_bytes(_mbox())
    argv = ["submit", "--mbox", str(f), "--tree", "mm", "--jobs", "thpscale", "--no-wait"]
    assert main([*argv, "--check-claims"]) == 0
    sid = int(capsys.readouterr().out.split()[1])
    meta = _meta(eng, sid)
    assert meta["check_claims"] is True
    _mapped(meta)


def test_push_option_and_list_yaml_opt_in():
    from stackbench.jobs.driver import intake
    from stackbench.kernels import lists
    from stackbench.patches.intake import read_push_options

    def pushed(option: str) -> bool | None:
        env = {"GIT_PUSH_OPTION_COUNT": "1", "GIT_PUSH_OPTION_0": option}
        return intake.Options.read(read_push_options(env)).check_claims

    assert pushed("check-claims") is True
    assert pushed("check-claims=false") is False
    with pytest.raises(intake.SubmissionErrors, match="check_claims"):
        pushed("check-claims=perhaps")
    data = {"name": "l", "archive": "https://example.org/l", "tree": "mm", "check_claims": True}
    assert lists.clean_list(data, Path("l.yaml")).check_claims is True
    assert lists.clean_list({**data, "check_claims": False}, Path("l.yaml")).check_claims is False
    with pytest.raises(StackbenchError, match="check_claims"):
        lists.clean_list({**data, "check_claims": "yes"}, Path("l.yaml"))


def _seed(prefix: str) -> str:
    seeds = SHARED / "seeds"
    found = sorted(seeds.glob(f"{prefix}_*.txt")) if seeds.is_dir() else []
    if not found:
        pytest.skip(f"seed {prefix} not in {seeds}")
    return found[0].read_text()


def _parsed(cover: str, subjects: list[str]):
    from stackbench.patches.parser import ParsedPatch

    n = len(subjects)
    patches = [
        ParsedPatch(
            idx=i,
            total=n,
            subject=s,
            author="a",
            author_email="a@example.org",
            date="",
            message_id=f"<p{i}@x>",
            in_reply_to=None,
            body="",
            diff="",
            raw=b"",
        )  # fmt: skip
        for i, s in enumerate(subjects, 1)
    ]
    return type("Parsed", (), {"cover_letter": cover, "patches": patches})()


def test_seed_004s_claims_add_the_thpscale_sizes_the_plan_lacks():
    from stackbench.jobs.driver import claims_plan
    from stackbench.jobs.executors.jobspecs import plans_for, resolve_jobs
    from stackbench.jobs.executors.settings import Settings

    parsed = _parsed(_seed("004"), ["mm: a", "mm: b", "mm: c"])
    jobs, kept, added = claims_plan.with_claims(parsed, ["thpscale"], 3, "v6.1")
    assert added and all(j.startswith("thpscale[") for j in added)
    assert jobs == ["thpscale", *added]
    plans_for(resolve_jobs(jobs, 3), Settings())  # no two jobs expand to the same sub-job
    assert {k["suite"] for k in kept if k["job"]} == {"thpscale"}
    assert any(k["reason"] and "beyond" in k["reason"] for k in kept)


def test_seed_000s_claims_are_kept_and_the_default_jobs_already_measure_them():
    from stackbench.jobs.driver import claims_plan

    parsed = _parsed(_seed("000"), ["mm: split folios during compaction",
                                    "mm: migrating folios during compaction"])  # fmt: skip
    jobs, kept, added = claims_plan.with_claims(parsed, None, None, "v6.1")
    assert jobs is None and added == []  # vm-scalability's default cases cover every test
    assert kept and {k["suite"] for k in kept if k["job"]} == {"vm-scalability"}
