#!/bin/sh
# Run one upstream vm-scalability case the way LKP's programs/vm-scalability/run does:
# usemem and the case scripts of the pinned commit (built on the host, /stackbench/upstream),
# the case's hw_vars sourced from its own directory, LKP's parameters as environment
# (runtime, nr_task, unit_size), every command announced by log_test as
# "YYYY-MM-DD HH:MM:SS  ./case-<test>", and the case repeated size/unit_size times while
# runtime lasts. As with LKP's pre_setup=1, the sparse root is a directory we prepared (on
# the guest's tmpfs: the initramfs guest has no disk and no mkfs) rather than a loop mount.
#
# In: TEST NR_TASK RUNTIME_S SIZE_BYTES MEM_PERMILLE (MEM_BYTES overrides the share),
#     SB_WORK (scratch dir), SB_UPSTREAM (default /stackbench/upstream),
#     SB_GUEST (default /stackbench/guest: log_test and the commands busybox lacks),
#     SB_HOST_TEST (set: leave the sysctls alone).
# Out: the case's raw output on stdout.
set -u

up=${SB_UPSTREAM:-/stackbench/upstream}/vm-scalability
guest=${SB_GUEST:-/stackbench/guest}
memtotal_kb=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)
# the same share of memory as the builtin runner: unit_size is half of it
mem=$((memtotal_kb * 1024 / 1000 * MEM_PERMILLE / 4096 * 4096))
[ -z "${MEM_BYTES:-}" ] || mem=$MEM_BYTES
unit_size=$((mem / 2))

export PATH="$guest/upstream-bin:$PATH"
export CMD=log_test
export runtime=$RUNTIME_S
export nr_task=$NR_TASK
export unit_size
export SPARSE_ROOT=$SB_WORK/vm-scalability
mkdir -p "$SPARSE_ROOT" /tmp/vm-scalability-tmp

# LKP's settings before a run (a guest of our own: nothing to restore; host tests of the
# runner set SB_HOST_TEST and leave the host's alone)
if [ -z "${SB_HOST_TEST:-}" ]; then
	echo 1 > /proc/sys/vm/overcommit_memory
	echo $((1 << 30)) > /proc/sys/vm/max_map_count
	echo $((1 << 20)) > /proc/sys/kernel/threads-max
fi

repeat=1
if [ "$SIZE_BYTES" -gt 0 ]; then
	repeat=$((SIZE_BYTES / unit_size))
	[ "$repeat" -ge 1 ] || repeat=1
	echo "repeat count: $repeat"
fi

cd "$up" || exit 2
start=$(date +%s)
rc=0
i=0
while [ "$i" -lt "$repeat" ]; do
	log_test "./case-$TEST" || rc=$?
	i=$((i + 1))
	if [ $(($(date +%s) - start)) -gt "$RUNTIME_S" ] && [ "$i" -lt "$repeat" ]; then
		echo "runtime exceeded, consider adjust size configuration"
		break
	fi
done
exit $rc
