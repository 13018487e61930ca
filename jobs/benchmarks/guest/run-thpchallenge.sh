#!/bin/sh
# mmtests' thpchallenge procedure with stackbench's own program: one thpfaults invocation
# per thread count, each writing threads-<N>.log into the run's output directory. No
# background challenge runs beside it (mmtests' THPCHALLENGE_BACKGROUND=none).
#
# In: THREADS ("1 3 4"), MAP_PERMILLE (MAP_BYTES overrides it), MADVISE, SB_BIN, SB_OUT.
set -u

hpage=2097152
memtotal_kb=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)
mapsize=$((memtotal_kb * 1024 / 1000 * MAP_PERMILLE / hpage * hpage))
[ -z "${MAP_BYTES:-}" ] || mapsize=$((MAP_BYTES / hpage * hpage))
echo "thpchallenge: size $mapsize bytes, threads $THREADS, madvise $MADVISE"

rc=0
for t in $THREADS; do
	echo "thpchallenge: $t threads"
	"$SB_BIN/thpfaults" challenge "$t" "$mapsize" "$MADVISE" > "$SB_OUT/threads-$t.log" 2>&1 || {
		st=$?
		echo "thpchallenge: $t threads failed (exit $st): $(tail -n 1 "$SB_OUT/threads-$t.log")" >&2
		rc=1
	}
done
exit $rc
