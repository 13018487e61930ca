#!/bin/sh
# mmtests' thpchallenge-bench procedure (background none) with the thpchallenge.c of the
# pinned commit: for each thread count, "Starting thpchallenge N/MAX" and threads-<N>.log.
# thpchallenge-bench drops no caches and writes no file.
#
# In: THREADS ("1 3 4"), MAP_PERMILLE (MAP_BYTES overrides it), MADVISE, SB_OUT,
#     SB_UPSTREAM (default /stackbench/upstream).
set -u

bin=${SB_UPSTREAM:-/stackbench/upstream}/thpchallenge/thpchallenge
hpage=2097152
memtotal_kb=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)
mapsize=$((memtotal_kb * 1024 / 1000 * MAP_PERMILLE / hpage * hpage))
[ -z "${MAP_BYTES:-}" ] || mapsize=$((MAP_BYTES / hpage * hpage))
max=0
for t in $THREADS; do max=$t; done

rc=0
for t in $THREADS; do
	echo "Starting thpchallenge $t/$max size:$((mapsize / 1048576))MB madv:$MADVISE"
	"$bin" "$t" "$mapsize" "$MADVISE" > "$SB_OUT/threads-$t.log" 2>&1 || {
		st=$?
		echo "thpchallenge: $t threads failed (exit $st): $(tail -n 1 "$SB_OUT/threads-$t.log")" >&2
		rc=1
	}
done
exit $rc
