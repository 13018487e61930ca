#!/bin/sh
# mmtests' thpscale-bench procedure with the thpscale.c of the pinned commit: one file of
# mapsize + 16 MB filled with random data (create_random_file), then for each thread count
# drop the caches, announce "Starting N/MAX" and write threads-<N>.log.
#
# In: THREADS ("1 3 4"), MAP_PERMILLE (MAP_BYTES overrides it), MADVISE, SB_WORK, SB_OUT,
#     SB_UPSTREAM (default /stackbench/upstream), SB_HOST_TEST (set: keep the host's caches).
set -u

bin=${SB_UPSTREAM:-/stackbench/upstream}/thpscale/thpscale
hpage=2097152
memtotal_kb=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)
mapsize=$((memtotal_kb * 1024 / 1000 * MAP_PERMILLE / hpage * hpage))
[ -z "${MAP_BYTES:-}" ] || mapsize=$((MAP_BYTES / hpage * hpage))
file=$SB_WORK/workfile
max=0
for t in $THREADS; do max=$t; done

size=$((mapsize + 1048576 * 16))
echo "Creating file $file of size $((size / 1048576)) MB filled with garbage"
# as mmtests: about 20 MB of random data, repeated until the file has its size
dd if=/dev/urandom of="$SB_WORK/random_base_file" ibs=1048575 count=20 2> /dev/null
: > "$file"
while [ "$(wc -c < "$file")" -lt "$size" ]; do
	cat "$SB_WORK/random_base_file" >> "$file"
done
truncate -s "$size" "$file"
rm -f "$SB_WORK/random_base_file"

# Upstream's thpscale races with itself: a thread's stack that is mapped while another
# thread's holes are punched can take the lowest hole, and that thread unmaps its whole first
# mapping at the end, stack page included (SIGSEGV in pthread_join; docs/suites.md).
# A run killed by SIGSEGV is run once more, and says so; a second one fails the run.
rc=0
for t in $THREADS; do
	for try in 1 2; do
		echo Dropping cache to avoid distorting init timings
		sync
		[ -n "${SB_HOST_TEST:-}" ] || echo 3 > /proc/sys/vm/drop_caches
		echo "Starting $t/$max"
		"$bin" "$t" "$mapsize" "$file" "$MADVISE" > "$SB_OUT/threads-$t.log" 2>&1 && break
		st=$?
		if [ "$st" = 139 ] && [ "$try" = 1 ]; then
			echo "thpscale: $t threads crashed (SIGSEGV, upstream's stack race); running again" >&2
			continue
		fi
		echo "thpscale: $t threads failed (exit $st): $(tail -n 1 "$SB_OUT/threads-$t.log")" >&2
		rc=1
		break
	done
done
rm -f "$file"
exit $rc
