#!/bin/sh
# one file per task, each streamed by two concurrent readers (use-twice page cache)

rc=0
i=1
while [ $i -le $nr_task ]; do
	truncate -s $((ROTATE_BYTES / nr_task)) $SPARSE_FILE-$i
	timeout -s INT ${runtime:-600} $READFILE -b 4096 $SPARSE_FILE-$i > $TMPFS_MNT/readfile-1-$i 2>&1 &
	timeout -s INT ${runtime:-600} $READFILE -b 4096 $SPARSE_FILE-$i > $TMPFS_MNT/readfile-2-$i 2>&1 &
	i=$((i + 1))
done
wait
for f in $TMPFS_MNT/readfile-*; do
	[ -s "$f" ] || { echo "empty reader output: $f" >&2; rc=1; }
	cat "$f"
	rm -f "$f"
done
rm -f $SPARSE_FILE-*
exit $rc
