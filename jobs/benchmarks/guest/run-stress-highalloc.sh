#!/bin/sh
# mmtests' stress-highalloc procedure with stackbench's module: passes 1 and 2 under a
# background load that dirties anonymous memory and page cache, pass 3 at rest. Each pass
# attempts MemTotal/hugepage * ALLOC_PERMILLE/1000 allocations PACE_MS apart and holds what
# it got until the pass ends; its log goes to pass<N>.log in the run's output directory.
#
# ORDER (default 9) is the allocation order, ATTEMPTS (when > 0) an explicit count per pass,
# PASSES (default 3) how many passes run: with fewer, the last one is still the one at rest.
#
# In: GFP PACE_MS ALLOC_PERMILLE LOAD_PERMILLE LOAD_TASKS [ORDER ATTEMPTS PASSES], SB_BIN,
#     SB_WORK, SB_OUT, SB_MODULE (the .ko; loaded here with order=ORDER, reloaded when a
#     previous job loaded it with another order).
set -u

ORDER=${ORDER:-9}
ATTEMPTS=${ATTEMPTS:-0}
PASSES=${PASSES:-3}
proc=/proc/stackbench_highalloc
param=/sys/module/stackbench_highalloc/parameters/order
if [ -e $proc ] && [ -r $param ] && [ "$(cat $param)" != "$ORDER" ]; then
	rmmod stackbench_highalloc || { echo "highalloc: rmmod for order $ORDER failed" >&2; exit 1; }
fi
if [ ! -e $proc ]; then
	[ -n "${SB_MODULE:-}" ] && [ -e "$SB_MODULE" ] || { echo "highalloc: no module" >&2; exit 1; }
	insmod "$SB_MODULE" order="$ORDER" ||
		{ echo "highalloc: insmod $SB_MODULE order=$ORDER failed" >&2; exit 1; }
fi

memtotal_kb=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)
attempts=$((memtotal_kb / 2048 * ALLOC_PERMILLE / 1000))
[ "$ATTEMPTS" -gt 0 ] && attempts=$ATTEMPTS
[ "$attempts" -ge 1 ] || attempts=1
load_bytes=$((memtotal_kb * 1024 / 1000 * LOAD_PERMILLE))
echo "highalloc: $attempts attempts per pass, order $ORDER, gfp $GFP, pace ${PACE_MS}ms, load $load_bytes bytes"

stop=$SB_WORK/highalloc-stop
# The guest has no swap and no disk: the load's memory cannot be reclaimed, so when the pass
# holds nearly everything an allocation of the load meets the OOM killer. It must kill the
# load, never this runner (it would lose the pass): the runner is exempt, the load first.
echo -1000 > /proc/self/oom_score_adj
reserve=$((memtotal_kb * 1024 / 16))

# Churn: anonymous memory written and freed by LOAD_TASKS processes, and page cache
# rewritten through four rotating tmpfs files, half of the load each. A cycle starts only
# while MemAvailable leaves room for it, so the load fragments memory early in a pass and
# then yields to the allocations instead of being killed over and over.
load() {
	echo 1000 > /proc/self/oom_score_adj
	anon=$((load_bytes / 2 / LOAD_TASKS))
	blocks=$((load_bytes / 2 / 4 / 65536))
	i=0
	while [ ! -e "$stop" ]; do
		avail_kb=$(awk '$1 == "MemAvailable:" { print $2 }' /proc/meminfo)
		if [ $((avail_kb * 1024)) -lt $((load_bytes + reserve)) ]; then
			sleep 0.2
			continue
		fi
		[ "$anon" -ge 4096 ] && "$SB_BIN/usemem" -n "$LOAD_TASKS" "$anon" > /dev/null
		[ "$blocks" -ge 1 ] && dd if=/dev/zero of="$SB_WORK/load-$((i % 4))" bs=65536 \
			count="$blocks" 2> /dev/null
		i=$((i + 1))
	done
}

pass() {
	echo "highalloc: pass $1"
	echo "$attempts $PACE_MS $GFP" > $proc || { echo "highalloc: pass $1 failed" >&2; return 1; }
	cat $proc > "$SB_OUT/pass$1.log"
	tail -n 1 "$SB_OUT/pass$1.log"
}

rc=0
rm -f "$stop"
if [ "$load_bytes" -gt 0 ]; then
	load &
	load_pid=$!
	sleep 1
fi
n=1
while [ "$n" -lt "$PASSES" ] && [ "$n" -le 2 ]; do
	pass $n || rc=1
	n=$((n + 1))
done
if [ "$load_bytes" -gt 0 ]; then
	touch "$stop"
	wait "$load_pid" || echo "highalloc: the load ended with $? (killed for memory?)"
	rm -f "$SB_WORK"/load-* "$stop"
fi
pass $n || rc=1
exit $rc
