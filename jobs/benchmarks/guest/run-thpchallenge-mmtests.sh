#!/bin/sh
# thpchallenge run by mmtests' own run-mmtests.sh (the pinned commit) inside the Debian
# image, as run-thpscale-mmtests.sh runs thpscale: the image mounted at /debian, the mmtests
# tree copied to /root/mmtests, a config with this job's threads, size and madvise and no
# background challenge, run-mmtests.sh started in a chroot, its threads-N.log files back
# gunzipped as <run>/threads-N.log.
#
# thpchallenge-install links with `gcc -lpthread -lnuma thpchallenge.c`, which Debian 12's
# linker refuses; the thpchallenge.c of the same commit, built on the host, is put where
# the install step would have put it. thpchallenge-bench checks for an installed fio even
# with no background; an empty fio install directory satisfies the check (fio never runs).
#
# In: THREADS ("1 3 4"), MAP_PERMILLE (MAP_BYTES overrides it), MADVISE, SB_OUT,
#     SB_UPSTREAM (default /stackbench/upstream), SB_IMAGE_DEV (default /dev/vda).
set -u

up=${SB_UPSTREAM:-/stackbench/upstream}
dev=${SB_IMAGE_DEV:-/dev/vda}
mnt=/debian
if ! grep -q " $mnt " /proc/mounts; then
	mkdir -p $mnt
	if ! mount -t ext4 "$dev" $mnt; then
		echo "image: cannot mount $dev as ext4 (no disk attached, or the kernel lacks" \
			"virtio-blk/ext4: kernel config debian-guest)" >&2
		exit 2
	fi
	for d in proc sys dev; do
		mount --bind /$d $mnt/$d
	done
fi

hpage=2097152
memtotal_kb=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)
mapsize=$((memtotal_kb * 1024 / 1000 * MAP_PERMILLE / hpage * hpage))
[ -z "${MAP_BYTES:-}" ] || mapsize=$((MAP_BYTES / hpage * hpage))
max=0
for t in $THREADS; do max=$t; done
madv=no
[ "$MADVISE" = 1 ] && madv=yes

mm=$mnt/root/mmtests
rm -rf $mm
cp -a "$up/mmtests" $mm
mkdir -p $mm/work/sources/thpchallenge-0-installed $mm/work/sources/fio-3.33-installed
cp "$up/thpchallenge/thpchallenge" $mm/work/sources/thpchallenge-0-installed/thpchallenge
cat > $mnt/root/stackbench.config << EOF2
export MMTESTS="thpchallenge"
export RUN_MONITOR=no
export THPCHALLENGE_BACKGROUND=none
export THPCHALLENGE_MIN_THREADS=1
export THPCHALLENGE_MAX_THREADS=$max
export THPCHALLENGE_THP_WSETSIZE=$mapsize
export THPCHALLENGE_MADV_HUGEPAGE=$madv
EOF2

echo "mmtests: run-mmtests.sh thpchallenge, threads 1..$max, size $((mapsize / 1048576)) MB"
chroot $mnt /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
	ASSUME_PACKAGE_INSTALLED=yes /bin/bash -c \
	'cd /root/mmtests && exec ./run-mmtests.sh --no-monitor --config /root/stackbench.config stackbench'
rc=$?

iter=$mm/work/log/stackbench/iter-0
n=0
for f in "$iter"/thpchallenge/logs/threads-*.log.gz; do
	[ -e "$f" ] || continue
	name=${f##*/}
	gunzip -c "$f" > "$SB_OUT/${name%.gz}"
	n=$((n + 1))
done
mkdir -p "$SB_OUT/mmtests"
for f in tests-timestamp tests-activity; do
	[ -e "$iter/$f" ] && cp "$iter/$f" "$SB_OUT/mmtests/"
done
cp "$iter"/thpchallenge/logs/*.time "$SB_OUT/mmtests/" 2> /dev/null
if [ $n = 0 ]; then
	echo "mmtests: run-mmtests.sh left no threads-N.log (rc $rc)" >&2
	[ $rc = 0 ] && rc=1
fi
exit $rc
