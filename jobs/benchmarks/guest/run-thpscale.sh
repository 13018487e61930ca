#!/bin/sh
# mmtests' thpscale procedure: one `thpfaults scale` invocation per thread count, each writing
# threads-<N>.log into the run's output directory, over a fresh sparse file of mapsize
# bytes (its page cache fills the holes punched in the anonymous memory).
#
# In: THREADS ("1 3 4"), MAP_PERMILLE (MAP_BYTES overrides it), MADVISE, SB_BIN, SB_WORK,
#     SB_OUT.
set -u

hpage=2097152
memtotal_kb=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)
mapsize=$((memtotal_kb * 1024 / 1000 * MAP_PERMILLE / hpage * hpage))
[ -z "${MAP_BYTES:-}" ] || mapsize=$((MAP_BYTES / hpage * hpage))
file=$SB_WORK/thpscale-file
echo "thpscale: mapsize $mapsize bytes, threads $THREADS, madvise $MADVISE"

rc=0
for t in $THREADS; do
	rm -f "$file"
	truncate -s "$mapsize" "$file"
	echo "thpscale: $t threads"
	"$SB_BIN/thpfaults" scale "$t" "$mapsize" "$file" "$MADVISE" > "$SB_OUT/threads-$t.log" 2>&1 || {
		st=$?
		echo "thpscale: $t threads failed (exit $st): $(tail -n 1 "$SB_OUT/threads-$t.log")" >&2
		rc=1
	}
done
rm -f "$file"
exit $rc
