#!/bin/busybox sh
# stackbench guest runner: the initramfs's /init.
#
# Runs every sub-job of /stackbench/plan ("<name> <suite> <runs> <timeout_s>" per line, its
# resolved parameters in /stackbench/jobs/<name>.env) <runs> times. Each run gets
# /results/<name>/<run>/ with the benchmark's raw output (output, stderr, files the suite
# writes), /proc snapshots before and after (vmstat, buddyinfo, pagetypeinfo, meminfo,
# zoneinfo as <file>.before / <file>.after), and a `status` file (rc, start/end epoch and
# uptime). A failing run is recorded and the next one starts. At the end /results goes to
# the host as a tar stream over the virtio serial port org.stackbench.results, then the
# guest reboots (QEMU runs with -no-reboot and exits).

/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /tmp /results
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2> /dev/null
mount -t tmpfs -o mode=1777 tmpfs /tmp

SB=/stackbench
R=/results
GUEST_LOG=$R/guest.log

say() {
	echo "stackbench: $*"
	echo "$(date +%s) $*" >> $GUEST_LOG
}

uptime_s() {
	cut -d' ' -f1 /proc/uptime
}

snapshot() { # <dir> <before|after>
	for f in vmstat buddyinfo pagetypeinfo meminfo zoneinfo; do
		[ -r /proc/$f ] && cat /proc/$f > "$1/$f.$2"
	done
}

results_port() {
	for n in /sys/class/virtio-ports/*/name; do
		[ -r "$n" ] || continue
		if [ "$(cat "$n")" = org.stackbench.results ]; then
			basename "$(dirname "$n")"
			return 0
		fi
	done
	return 1
}

send_results() {
	port=$(results_port) || { say "no virtio port org.stackbench.results; results lost"; return 1; }
	dev=/dev/$port
	if [ ! -c "$dev" ]; then
		majmin=$(cat /sys/class/virtio-ports/$port/dev)
		mknod "$dev" c "${majmin%%:*}" "${majmin##*:}"
	fi
	say "sending results over $dev"
	sync
	tar -C $R -cf "$dev" . || say "tar to $dev failed"
	sync
}

run_one() { # <name> <suite> <run> <timeout_s>
	name=$1 suite=$2 run=$3 tmo=$4
	d=$R/$name/$run
	mkdir -p "$d"
	rm -rf /tmp/work
	mkdir -p /tmp/work
	sync
	echo 3 > /proc/sys/vm/drop_caches 2> /dev/null
	snapshot "$d" before
	t0=$(uptime_s)
	e0=$(date +%s)
	(
		set -a
		. "$SB/jobs/$name.env"
		SB_BIN=$SB/bin SB_CASES=$SB/cases SB_WORK=/tmp/work SB_OUT=$d
		SB_MODULE=$SB/modules/stackbench_highalloc.ko
		set +a
		exec timeout -s KILL "$tmo" sh "$SB/guest/run-$suite.sh"
	) < /dev/null > "$d/output" 2> "$d/stderr"
	rc=$?
	t1=$(uptime_s)
	e1=$(date +%s)
	snapshot "$d" after
	printf 'rc %s\nstart_epoch %s\nend_epoch %s\nstart_uptime %s\nend_uptime %s\n' \
		"$rc" "$e0" "$e1" "$t0" "$t1" > "$d/status"
	say "$name run $run: rc=$rc elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')s"
}

say "guest up: $(uname -r), $(nproc) cpus, $(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo) kB"
cp $SB/plan $R/plan
uname -a > $R/uname
cat /proc/cmdline > $R/cmdline
[ -r /proc/version ] && cat /proc/version > $R/version

while read -r name suite runs tmo; do
	case "$name" in "" | "#"*) continue ;; esac
	run=0
	while [ "$run" -lt "$runs" ]; do
		run_one "$name" "$suite" "$run" "$tmo"
		run=$((run + 1))
	done
done < $SB/plan

dmesg > $R/dmesg 2> /dev/null
date +%s > $R/complete
say "all runs done"
send_results
reboot -f
