"""The comparison page's verdict section: the changed and undecided headline metrics, largest
first, one line counting the rest, and every row when the comparison asks for all."""

from __future__ import annotations

import re

import pytest
from test_verdict_table import BASE, SAME, SLOW, _runs

from stackbench.resultsdb import ingest as ig

pytest_plugins = ["helpers.web"]


@pytest.fixture(autouse=True)
def signed_in(eng, client):
    from helpers.web import add_user, login

    add_user(eng, "alice")  # starting a comparison needs an account
    login(client)


def _section(page: str) -> str:
    start = page.index("<h2>stackbench verdicts</h2>")
    return page[start : page.index("</table>", start) if "</table>" in page[start:] else None]


def _metrics(section: str) -> list[str]:
    return re.findall(r'<td class="mono">([^<]+)</td>', section)


def _open(client, query):
    picked = client.get("/compare/new", query_string=query)
    assert picked.status_code == 303
    return client.get(picked.headers["Location"]).get_data(as_text=True)


def test_verdict_section_lists_headline_changes_largest_first(eng, client):
    for commit, name, tput, free, seed in (
        (BASE, "base", 100000.0, 2.0, 1),
        (SLOW, "slow", 90000.0, 2.4, 2),
    ):
        ig.ingest(eng, _runs(commit, name, tput, free, seed))
    page = _open(client, {"k": f"{BASE[:10]} {SLOW[:10]}"})
    section = _section(page)
    # throughput -10% (worse); free_time (+20%, undecided), workload, migrate_mbps hidden
    assert _metrics(section) == ["vm-scalability.throughput"]
    rest = re.search(r'id="verdict-rest">([^<]+)<', page).group(1)
    assert rest.startswith("3 more metrics not shown: 0 changed and 1 undecided")
    assert "2 unchanged or n/a" in rest


def test_verdict_section_with_nothing_open_says_so_and_all_shows_every_row(eng, client):
    for commit, name, seed in ((BASE, "base", 1), (SAME, "same", 3)):
        runs = _runs(commit, name, 100000.0, 2.0, seed)
        for r in runs:
            r.samples.pop("vm-scalability.free_time")  # a latency needs 10 boots to decide
        ig.ingest(eng, runs)
    page = _open(client, {"k": f"{BASE[:10]} {SAME[:10]}"})
    assert 'id="no-headline"' in page and "3 more metrics not shown" in page
    page = _open(client, {"k": f"{BASE[:10]} {SAME[:10]}", "all": "1"})
    assert len(_metrics(_section(page))) == 3 and 'id="verdict-rest"' not in page


def test_verdict_section_lists_the_counters_that_changed_with_interval_and_q(eng, client):
    from test_report_evidence import BASE as B
    from test_report_evidence import C1, FAULTS, NOISY, STALL, _planted

    ig.ingest(eng, _planted("base", B))
    ig.ingest(eng, _planted("1/1", C1))
    page = _open(client, {"k": f"{B[:10]} {C1[:10]}"})
    section = _section(page)
    assert STALL in _metrics(section)
    assert FAULTS not in section and NOISY not in section
    row = section[section.index(STALL) :].split("</tr>", 1)[0]
    assert re.search(r"\[\+2\d\.\d+%, \+3\d\.\d+%\]", row), row
    assert re.search(r'class="muted counter-q">q=', row) and "changed" in row
