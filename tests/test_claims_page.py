"""A series page shows the claims of its cover letter as soon as the series is stored:
what each claims and the job and kernels of ours that would measure it, or why none; for
a list series, as soon as the watcher has read the thread from a real public-inbox archive,
before any kernel is built."""

from __future__ import annotations

import re

from listmail import LIST, ROBOT, demo_mails, list_def
from pubinbox import Inbox
from sqlalchemy import func, select, update
from test_web_support import add_tree, db, make_series

from stackbench.jobs.lists import list_watch
from stackbench.patches import claims
from stackbench.resultsdb.models import KernelBuild, Series

pytest_plugins = ["test_web_support"]

COVER = """\
Highlights: mmap-pread-seq-mt: -18.3% if split folios during compaction.

=========================================================================================
compiler/kconfig/rootfs/runtime/tbox_group/test/testcase:
  gcc-13/defconfig/debian/300s/qemu-vm/mmap-pread-seq-mt/vm-scalability

commit:
  v6.1
  mm-patch-1
  mm-patch-2

            v6.1                  mm-patch-1                  mm-patch-2
---------------- --------------------------- ---------------------------
         %stddev     %change         %stddev     %change         %stddev
             \\          |                \\          |                \\
  14314960           -18.3%   11691969 ±  2%      -7.7%   13217795        vm-scalability.throughput

                                      baselin                 patche
                                     baseline                patches
Amean     fault-both-3     2614.80 (   0.00%)     2217.14 *  15.21%*
Amean     fault-both-32   23442.93 (   0.00%)    16564.83 *  29.34%*
"""


def test_series_page_lists_the_cover_letters_claims(eng, client):
    add_tree(eng)
    sid = make_series(eng)
    html = client.get(f"/series/{sid}").get_data(as_text=True)
    assert 'id="cover-claims"' not in html  # "Cover text" claims nothing
    with db(eng) as s, s.begin():
        s.execute(update(Series).where(Series.id == sid).values(cover_letter=COVER))
    html = client.get(f"/series/{sid}").get_data(as_text=True)
    assert 'id="cover-claims"' in html
    block = html[
        html.index('id="cover-claims"') : html.index("</section>", html.index('id="cover-claims"'))
    ]
    assert "5 claims read" in block and "4 map to a job" in block
    # the LKP columns are the series' base and its two patches, in order
    assert "vm-scalability[test=mmap-pread-seq-mt]" in block and "0 &rarr; 1" in block
    assert "-18.30%" in block and "-7.70%" in block and "0 &rarr; 2" in block
    # mmtests' baseline/patches are the base and the last patch
    assert "thpscale.fault-both-3 (Amean)" in block and "+15.21%" in block
    assert "not mapped: 32 threads is beyond thpscale&#39;s 4 x CPUs" in block
    # the highlight is the LKP table's figure for mm-patch-1: it maps with it
    assert block.count("vm-scalability[test=mmap-pread-seq-mt]") == 3


def test_a_list_series_shows_its_claims_as_soon_as_the_mail_is_read(eng, client, tmp_path):
    box = Inbox(tmp_path, LIST)
    try:
        for raw in demo_mails():
            box.deliver(raw)
        rep = list_watch.fetch(eng, list_def(str(box.dir)), own_sender=ROBOT)
    finally:
        box.stop()
    assert not rep.error and len(rep.series) == 1, rep.line()
    with db(eng) as s:
        row = s.scalars(select(Series)).one()
        sid, state, cover = row.id, row.state, row.cover_letter
        assert s.scalar(select(func.count()).select_from(KernelBuild)) == 0
    assert state == "new"  # nothing applied or built yet
    want = claims.parse(cover)
    assert len(want) > 10  # the demo cover's LKP and mmtests tables
    html = client.get(f"/series/{sid}").get_data(as_text=True)
    start = html.index('id="cover-claims"')
    block = html[start : html.index("</section>", start)]
    assert f"{len(want)} claims read" in block
    assert len(re.findall(r"<tr>\s*<td>", block)) == len(want)
    for c in want:
        assert c.metric in block
    assert "vm-scalability[test=anon-w-rand]" in block
