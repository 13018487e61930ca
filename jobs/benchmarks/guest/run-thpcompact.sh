#!/bin/sh
# mmtests' thpcompact procedure with stackbench's own program: one thpfaults invocation per
# thread count, each writing threads-<N>.log into the run's output directory, over one
# sparse file whose page cache fills the holes punched in the anonymous memory. Its size is
# rounded as thpcompact-bench rounds it: (size + 2 MB x max threads) & ~(that - 1).
#
# In: THREADS ("1 3 4"), ANON_PERMILLE, FILE_PERMILLE (ANON_BYTES, FILE_BYTES override
#     them), MADVISE, SB_BIN, SB_WORK, SB_OUT.
set -u

hpage=2097152
memtotal_kb=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)
anon=$((memtotal_kb * 1024 / 1000 * ANON_PERMILLE / hpage * hpage))
filesize=$((memtotal_kb * 1024 / 1000 * FILE_PERMILLE))
[ -z "${ANON_BYTES:-}" ] || anon=$((ANON_BYTES / hpage * hpage))
[ -z "${FILE_BYTES:-}" ] || filesize=$FILE_BYTES
max=0
for t in $THREADS; do max=$t; done
align=$((hpage * max))
filesize=$(((filesize + align) & ~(align - 1)))
file=$SB_WORK/thpcompact-file
echo "thpcompact: anon $anon bytes, file $filesize bytes, threads $THREADS, madvise $MADVISE"

rc=0
for t in $THREADS; do
	rm -f "$file"
	truncate -s "$filesize" "$file"
	echo "thpcompact: $t threads"
	"$SB_BIN/thpfaults" compact "$t" "$anon" "$filesize" "$file" "$MADVISE" \
		> "$SB_OUT/threads-$t.log" 2>&1 || {
		st=$?
		echo "thpcompact: $t threads failed (exit $st): $(tail -n 1 "$SB_OUT/threads-$t.log")" >&2
		rc=1
	}
done
rm -f "$file"
exit $rc
