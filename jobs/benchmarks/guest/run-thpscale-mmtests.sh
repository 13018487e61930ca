#!/bin/sh
# thpscale run by mmtests' own run-mmtests.sh (the pinned commit) inside the Debian image
# (jobs/benchmarks/guest/image.py, attached as /dev/vda with QEMU's snapshot=on, so every boot starts
# from the built image). The image is mounted at /debian with /proc, /sys and /dev bound in,
# the mmtests tree copied to /root/mmtests, a thpscale config written with this job's
# thread counts, map size and madvise, and run-mmtests.sh started in a chroot. Its
# threads-N.log files come back gunzipped as <run>/threads-N.log, the files the thpscale
# parser reads whatever ran the benchmark.
#
# mmtests' thpscale-install links with `gcc -lpthread -lnuma thpscale.c`, which Debian 12's
# linker refuses (the libraries come before the object that needs them); the thpscale.c of
# the same commit, built on the host (jobs/benchmarks/suites.py), is put where that install step would
# have put its binary, so run-mmtests.sh finds it installed.
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
mkdir -p $mm/work/sources/thpscale-0-installed
cp "$up/thpscale/thpscale" $mm/work/sources/thpscale-0-installed/thpscale
cat > $mnt/root/stackbench.config << EOF
export MMTESTS="thpscale"
export RUN_MONITOR=no
export THPSCALE_MIN_THREADS=1
export THPSCALE_MAX_THREADS=$max
export THPSCALE_MAPSIZE=$mapsize
export THPSCALE_MADV_HUGEPAGE=$madv
EOF

echo "mmtests: run-mmtests.sh thpscale, threads 1..$max, mapsize $((mapsize / 1048576)) MB"
chroot $mnt /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
	ASSUME_PACKAGE_INSTALLED=yes /bin/bash -c \
	'cd /root/mmtests && exec ./run-mmtests.sh --no-monitor --config /root/stackbench.config stackbench'
rc=$?

iter=$mm/work/log/stackbench/iter-0
n=0
for f in "$iter"/thpscale/logs/threads-*.log.gz; do
	[ -e "$f" ] || continue
	name=${f##*/}
	gunzip -c "$f" > "$SB_OUT/${name%.gz}"
	n=$((n + 1))
done
mkdir -p "$SB_OUT/mmtests"
for f in tests-timestamp tests-activity thpscale/logs/mmtests.log.gz; do
	[ -e "$iter/$f" ] && cp "$iter/$f" "$SB_OUT/mmtests/"
done
cp "$iter"/thpscale/logs/*.time "$SB_OUT/mmtests/" 2> /dev/null
if [ $n = 0 ]; then
	echo "mmtests: run-mmtests.sh left no threads-N.log (rc $rc)" >&2
	[ $rc = 0 ] && rc=1
fi
exit $rc
