#!/bin/sh
# mmtests' thpcompact-bench procedure with the thpcompact.c of the pinned commit: the file
# size rounded up to 2 MB per thread of the largest count, vm.max_map_count raised for the
# holes, one file of that size filled with random data (create_random_file), then for each
# thread count drop the caches, announce "Starting N/MAX" and write threads-<N>.log.
#
# In: THREADS ("1 3 4"), ANON_PERMILLE, FILE_PERMILLE (ANON_BYTES, FILE_BYTES override
#     them), MADVISE, SB_WORK, SB_OUT, SB_UPSTREAM (default /stackbench/upstream),
#     SB_HOST_TEST (set: keep the host's caches and sysctls).
set -u

bin=${SB_UPSTREAM:-/stackbench/upstream}/thpcompact/thpcompact
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
file=$SB_WORK/workfile

[ -n "${SB_HOST_TEST:-}" ] || echo $((anon * 2 / 1048576)) > /proc/sys/vm/max_map_count
echo "Creating file $file of size $((filesize / 1048576)) MB filled with garbage"
# as mmtests: about 20 MB of random data, repeated until the file has its size
dd if=/dev/urandom of="$SB_WORK/random_base_file" ibs=1048575 count=20 2> /dev/null
: > "$file"
while [ "$(wc -c < "$file")" -lt "$filesize" ]; do
	cat "$SB_WORK/random_base_file" >> "$file"
done
truncate -s "$filesize" "$file"
rm -f "$SB_WORK/random_base_file"
echo "Total anon: $((anon / 1048576)) MB"
echo "Total file: $((filesize / 1048576)) MB"

# Upstream's thpcompact races with itself: a thread's stack that is mapped while another
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
		"$bin" "$t" "$anon" "$filesize" "$file" "$MADVISE" > "$SB_OUT/threads-$t.log" 2>&1 && break
		st=$?
		if [ "$st" = 139 ] && [ "$try" = 1 ]; then
			echo "thpcompact: $t threads crashed (SIGSEGV, upstream's stack race); running again" >&2
			continue
		fi
		echo "thpcompact: $t threads failed (exit $st): $(tail -n 1 "$SB_OUT/threads-$t.log")" >&2
		rc=1
		break
	done
done
rm -f "$file"
exit $rc
