# Sourced by run-<suite>-mmtests.sh: what running one of mmtests' THP benchmarks with
# mmtests' own run-mmtests.sh inside the Debian image takes, whatever the benchmark. The
# image (jobs/benchmarks/guest/image.py, attached as /dev/vda with QEMU's snapshot=on, so
# every boot starts from the built image) is mounted at /debian with /proc, /sys and /dev
# bound in, the mmtests tree copied to /root/mmtests with the benchmark's binary where its
# install step would have put it, run-mmtests.sh started in a chroot on the config the
# runner wrote to $mnt/root/stackbench.config, and its threads-N.log files brought back
# gunzipped as <run>/threads-N.log, the files the thpscale parser reads whatever ran the
# benchmark.
#
# mmtests' <suite>-install links with `gcc -lpthread -lnuma <suite>.c`, which Debian 12's
# linker refuses (the libraries come before the object that needs them); the <suite>.c of
# the same commit, built on the host (jobs/benchmarks/suites.py), is installed instead.
#
# In: THREADS ("1 3 4"), MADVISE, SB_OUT, SB_UPSTREAM (default /stackbench/upstream),
#     SB_IMAGE_DEV (default /dev/vda), SB_IMAGE_ROOT (where to mount it, default /debian).
# Out: mnt, mm (the tree in the image), hpage, memtotal_kb, max (the most threads), madv
#      (yes/no), rc (run-mmtests.sh's exit status, after mmtests_run).
set -u

up=${SB_UPSTREAM:-/stackbench/upstream}
dev=${SB_IMAGE_DEV:-/dev/vda}
mnt=${SB_IMAGE_ROOT:-/debian}
mm=$mnt/root/mmtests
hpage=2097152
rc=0

mmtests_mount_image() {
	grep -q " $mnt " /proc/mounts && return 0
	mkdir -p $mnt
	if ! mount -t ext4 "$dev" $mnt; then
		echo "image: cannot mount $dev as ext4 (no disk attached, or the kernel lacks" \
			"virtio-blk/ext4: kernel config debian-guest)" >&2
		exit 2
	fi
	for d in proc sys dev; do
		mount --bind /$d $mnt/$d
	done
}

# the guest's memory, the most threads of THREADS and MADVISE as mmtests spells it
mmtests_guest() {
	memtotal_kb=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)
	max=0
	for t in $THREADS; do max=$t; done
	madv=no
	[ "$MADVISE" = 1 ] && madv=yes
}

# mmtests_install SUITE [DIR...]: the tree and SUITE's host-built binary in the image; each
# DIR is made under work/sources too (an install another step only checks for)
mmtests_install() {
	suite=$1
	shift
	rm -rf $mm
	cp -a "$up/mmtests" $mm
	mkdir -p $mm/work/sources/$suite-0-installed
	for d in "$@"; do mkdir -p "$mm/work/sources/$d"; done
	cp "$up/$suite/$suite" $mm/work/sources/$suite-0-installed/$suite
}

# mmtests_run SUITE WHAT: run-mmtests.sh on the written config; WHAT says the run's size
mmtests_run() {
	echo "mmtests: run-mmtests.sh $1, threads 1..$max, $2"
	chroot $mnt /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
		ASSUME_PACKAGE_INSTALLED=yes /bin/bash -c \
		'cd /root/mmtests && exec ./run-mmtests.sh --no-monitor --config /root/stackbench.config stackbench'
	rc=$?
}

# mmtests_collect SUITE: the threads-N.log files under $SB_OUT, and the iteration's directory
# as run-mmtests.sh left it (logs still gzipped, tests-timestamp, tests-sysstate, the
# /usr/bin/time files) as $SB_OUT/mmtests/iter-0, so compare-kernels can be run on the very
# files this run made; exits with the run's status
mmtests_collect() {
	suite=$1
	iter=$mm/work/log/stackbench/iter-0
	n=0
	for f in "$iter"/$suite/logs/threads-*.log.gz; do
		[ -e "$f" ] || continue
		name=${f##*/}
		gunzip -c "$f" > "$SB_OUT/${name%.gz}"
		n=$((n + 1))
	done
	mkdir -p "$SB_OUT/mmtests"
	[ -d "$iter" ] && cp -a "$iter" "$SB_OUT/mmtests/"
	if [ $n = 0 ]; then
		echo "mmtests: run-mmtests.sh left no threads-N.log (rc $rc)" >&2
		[ $rc = 0 ] && rc=1
	fi
	exit $rc
}
