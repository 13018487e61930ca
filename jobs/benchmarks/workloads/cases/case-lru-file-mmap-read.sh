#!/bin/sh
# one file per task, each read once through a mapping (use-once page cache)

rc=0
pids=
i=1
while [ $i -le $nr_task ]; do
	truncate -s $((ROTATE_BYTES / nr_task)) $SPARSE_FILE-$i
	$USEMEM -f $SPARSE_FILE-$i --readonly $((ROTATE_BYTES / nr_task)) &
	pids="$pids $!"
	i=$((i + 1))
done
# wait for each reader so a failed one fails the case
for pid in $pids; do wait $pid || rc=1; done
rm -f $SPARSE_FILE-*
exit $rc
