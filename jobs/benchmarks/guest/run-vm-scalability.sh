#!/bin/sh
# Run one vm-scalability case LKP-style: announce every repetition with
# "YYYY-MM-DD HH:MM:SS  ./case-<test>" (LKP's sample separator), repeat size/unit_size times
# (once without a size) and stop repeating once RUNTIME_S has passed.
#
# In: TEST NR_TASK RUNTIME_S SIZE_BYTES MEM_PERMILLE (the sub-job's resolved params; MEM_BYTES
#     overrides the share of MemTotal),
#     SB_BIN (our programs), SB_CASES (case scripts), SB_WORK (scratch tmpfs dir).
# Out: the cases' raw output on stdout.
set -u

memtotal_kb=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)
# the cases size themselves from $mem: our share of MemTotal, in bytes
mem=$((memtotal_kb * 1024 / 1000 * MEM_PERMILLE / 4096 * 4096))
# an explicit size wins (host tests of the cases use a few MB)
[ -z "${MEM_BYTES:-}" ] || mem=$MEM_BYTES
unit_size=$((mem / 2))
iterations=1
if [ "$SIZE_BYTES" -gt 0 ]; then
	iterations=$((SIZE_BYTES / unit_size))
	[ "$iterations" -ge 1 ] || iterations=1
fi

export mem unit_size
export nr_task=$NR_TASK
export runtime=$RUNTIME_S
export USEMEM=$SB_BIN/usemem
export READFILE=$SB_BIN/readfile
export TMPFS_MNT=$SB_WORK
export SPARSE_FILE=$SB_WORK/sparse-$TEST
# bytes of file data the page-cache cases stream through
export ROTATE_BYTES=$mem

start=$(date +%s)
rc=0
i=0
while [ "$i" -lt "$iterations" ]; do
	echo "$(date '+%Y-%m-%d %H:%M:%S')  ./case-$TEST"
	(cd "$SB_CASES" && sh "./case-$TEST") || rc=$?
	i=$((i + 1))
	[ $(($(date +%s) - start)) -lt "$RUNTIME_S" ] || break
done
exit $rc
