#!/bin/busybox sh
# stackbench guest runner: the initramfs's /init.
#
# Runs every sub-job of /stackbench/plan ("<name> <suite> <runs> <timeout_s>" per line, its
# resolved parameters in /stackbench/jobs/<name>.env) <runs> times. Each run gets
# /results/<name>/<run>/ with the benchmark's raw output (output, stderr, files the suite
# writes), /proc snapshots before and after (vmstat, buddyinfo, pagetypeinfo, meminfo,
# zoneinfo as <file>.before / <file>.after), and a `status` file (rc, start/end epoch and
# uptime). A failing run is recorded and the next one starts.
#
# Before each run the job's system knobs (/stackbench/jobs/<name>.knobs, jobs/benchmarks/knobs.py) are
# written, after the knobs an earlier job changed went back to their boot-time values; what
# the kernel reads back goes to <run>/knobs. A knob the kernel lacks or refuses fails the run
# (<run>/knob-error). A job with a scenario stage (SCENARIO... in its .env) gets it started
# by scenario.sh before the benchmark and stopped after, with snapshots
# <file>.scenario-before taken before it; extfrag_index and unusable_index come from debugfs
# when the kernel has it. At the end /results goes to
# the host as a tar stream over the virtio serial port org.stackbench.results, then the
# guest reboots (QEMU runs with -no-reboot and exits). With /stackbench/native (a bare-metal
# box running the same image in a chroot, jobs/executors/native.py) it just exits.

/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /tmp /results
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2> /dev/null
mount -t tmpfs -o mode=1777 tmpfs /tmp
[ -d /sys/kernel/debug ] && mount -t debugfs debugfs /sys/kernel/debug 2> /dev/null
[ -d /sys/kernel/tracing ] && mount -t tracefs tracefs /sys/kernel/tracing 2> /dev/null

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

snapshot() { # <dir> <before|after|scenario-before>
	for f in vmstat buddyinfo pagetypeinfo meminfo zoneinfo; do
		[ -r /proc/$f ] && cat /proc/$f > "$1/$f.$2"
	done
	for f in extfrag_index unusable_index; do
		[ -r /sys/kernel/debug/extfrag/$f ] && cat /sys/kernel/debug/extfrag/$f > "$1/$f.$2"
	done
	# kcompactd's CPU time ("(kcompactdN) utime stime" in clock ticks): its proactive work
	# shows here even on kernels that count it in no compact_daemon_* counter
	for p in /proc/[0-9]*; do
		case "$(cat $p/comm 2> /dev/null)" in
		kcompactd*) cut -d' ' -f2,14,15 $p/stat 2> /dev/null ;;
		esac
	done > "$1/kcompactd.$2"
	# the clock every latency is timed with: a jiffies clocksource or a switch during the
	# run (the watchdog's console lines) makes the run's latencies coarse (jobs/benchmarks/collect.py)
	{
		echo "source $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
		$SB/bin/clockres
		dmesg | grep -iE 'clocksource|tsc: ' | sed 's/^/log /'
	} > "$1/clock.$2" 2> /dev/null
}

# a knob file's value; THP's "always [madvise] never" reads as the bracketed choice
knob_value() {
	v=$(cat "$1" 2> /dev/null) || return 1
	case "$v" in
	*"["*"]"*) echo "$v" | sed -n 's/.*\[\(.*\)\].*/\1/p' ;;
	*) echo "$v" ;;
	esac
}

save_knob_defaults() {
	: > /tmp/knob-defaults
	[ -r $SB/knobs ] || return 0
	while read -r k path; do
		v=$(knob_value "$path") && echo "$path $v" >> /tmp/knob-defaults
	done < $SB/knobs
}

restore_knobs() {
	while read -r path v; do
		[ "$(knob_value "$path")" = "$v" ] || echo "$v" > "$path" 2> /dev/null
	done < /tmp/knob-defaults
}

apply_knobs() { # <name> <run dir>; 1 with <run dir>/knob-error when the kernel says no
	f=$SB/jobs/$1.knobs
	if [ -s "$f" ]; then
		while read -r k path v; do
			if [ ! -e "$path" ]; then
				echo "knob $k: this kernel has no $path" > "$2/knob-error"
				return 1
			fi
			if ! echo "$v" > "$path" 2> /dev/null; then
				echo "knob $k: the kernel refused $v (writing $path)" > "$2/knob-error"
				return 1
			fi
		done < "$f"
	fi
	for w in $(cat $SB/jobs/$1.cmdline 2> /dev/null); do
		if ! grep -qw -- "$w" /proc/cmdline; then
			echo "cmdline $w: not on the kernel command line" > "$2/knob-error"
			return 1
		fi
		if grep -q "Unknown kernel command line parameters.*$w" /tmp/dmesg-boot; then
			echo "cmdline $w: this kernel does not know the parameter" > "$2/knob-error"
			return 1
		fi
	done
	: > "$2/knobs"
	while read -r k path; do
		v=$(knob_value "$path") && echo "$k $v" >> "$2/knobs"
	done < $SB/knobs
	cp /proc/cmdline "$2/cmdline"
}

scenario() { # <start|stop> <name> <run dir>
	(
		set -a
		. "$SB/jobs/$2.env"
		SB_BIN=$SB/bin SB_WORK=/tmp/work SB_OUT=$3
		set +a
		exec sh "$SB/guest/scenario.sh" "$1"
	) < /dev/null >> "$3/scenario.log" 2>&1
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
	# the port's name comes from QEMU in a control message after the port itself, later on
	# a loaded host: wait for it up to 30 s
	tries=0
	until port=$(results_port); do
		tries=$((tries + 1))
		[ $tries -ge 60 ] && { say "no virtio port org.stackbench.results; results lost"; return 1; }
		sleep 0.5
	done
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

# An evidence boot (jobs/executors/coverage_stage.py) lists the functions the series' patches
# change in /stackbench/coverage: ftrace's function tracer, filtered to them, records their
# calls during each benchmark; <run>/funcprof gets "<function> <calls>" lines, the names this
# kernel cannot trace (inlined, notrace, absent) go to <run>/funcprof-untraceable, events
# the ring buffer dropped to <run>/funcprof-overrun. Not the function profiler: without the
# graph tracer it ignores set_ftrace_filter and patches every function, which under TCG
# with two vCPUs died on a stray int3. Measured boots have no list.
T=/sys/kernel/tracing
funcprof_start() { # <run dir>
	[ -s $SB/coverage ] || return 0
	if [ ! -e $T/set_ftrace_filter ]; then
		echo "this kernel has no function tracer ($T/set_ftrace_filter)" > "$1/funcprof-error"
		return 0
	fi
	: > $T/set_ftrace_filter
	: > "$1/funcprof-untraceable"
	while read -r fn; do
		[ -n "$fn" ] && echo "$fn" >> $T/set_ftrace_filter 2> /dev/null
	done < $SB/coverage
	# what the kernel took, read back: a refused name's failed write is not always reported
	while read -r fn; do
		[ -n "$fn" ] || continue
		grep -qx "$fn" $T/set_ftrace_filter || echo "$fn" >> "$1/funcprof-untraceable"
	done < $SB/coverage
	# an empty filter would trace every function (tracefs files have no size: read it)
	grep -q . $T/set_ftrace_filter || return 0
	echo 0 > $T/tracing_on
	echo 8192 > $T/buffer_size_kb
	: > $T/trace
	echo function > $T/current_tracer && echo 1 > $T/tracing_on && : > /tmp/funcprof-on
}

funcprof_stop() { # <run dir>
	[ -e /tmp/funcprof-on ] || return 0
	rm -f /tmp/funcprof-on
	echo 0 > $T/tracing_on
	grep -v '^#' $T/trace | sed -n 's/.*: \([^ ]*\) <-.*/\1/p' | sort | uniq -c |
		awk '{ print $2, $1 }' > "$1/funcprof"
	cat $T/per_cpu/cpu*/stats 2> /dev/null | awk '$1 == "overrun:" { n += $2 } END { print n + 0 }' \
		> "$1/funcprof-overrun"
	echo nop > $T/current_tracer
	echo 1 > $T/tracing_on
}

# An evidence boot that profiles (jobs/benchmarks/perfprof.py) carries Debian's perf with its
# libraries in /stackbench/perf: during each benchmark it samples every CPU on the cpu-clock
# event (TCG has no PMU) with kernel call chains into <run>/perf.data, which the host reads
# against the kernel's System.map. No build-ids are collected (-B): the host knows the kernel,
# and the walk over every mapped file would cost the guest seconds. Why perf could not run
# goes to <run>/perf-error.
P=$SB/perf
perf_start() { # <run dir>
	[ -x $P/perf ] || return 0
	if [ ! -e /proc/sys/kernel/perf_event_paranoid ]; then
		echo "this kernel has no perf events (CONFIG_PERF_EVENTS)" > "$1/perf-error"
		return 0
	fi
	echo -1 > /proc/sys/kernel/perf_event_paranoid
	echo 0 > /proc/sys/kernel/kptr_restrict 2> /dev/null
	$P/ld.so --library-path $P/lib $P/perf record -q -B -e cpu-clock -F $(cat $P/frequency) \
		-a -g -o "$1/perf.data" > "$1/perf.log" 2>&1 &
	echo $! > /tmp/perf-pid
	# perf is ready when it has written its header; a benchmark started before is partly missed
	n=0
	while [ ! -s "$1/perf.data" ] && [ $n -lt 100 ] && kill -0 $! 2> /dev/null; do
		sleep 0.1
		n=$((n + 1))
	done
}

perf_stop() { # <run dir>
	[ -e /tmp/perf-pid ] || return 0
	pid=$(cat /tmp/perf-pid)
	rm -f /tmp/perf-pid
	kill -INT "$pid" 2> /dev/null
	wait "$pid"
	prc=$?
	if [ ! -s "$1/perf.data" ]; then
		echo "perf record exited $prc: $(tail -n 1 "$1/perf.log")" > "$1/perf-error"
	fi
}

run_one() { # <name> <suite> <run> <timeout_s>
	name=$1 suite=$2 run=$3 tmo=$4
	d=$R/$name/$run
	mkdir -p "$d"
	rm -rf /tmp/work
	mkdir -p /tmp/work
	sync
	echo 3 > /proc/sys/vm/drop_caches 2> /dev/null
	restore_knobs
	t0=$(uptime_s)
	e0=$(date +%s)
	staged=0
	unset rc
	grep -q '^SCENARIO=' "$SB/jobs/$name.env" && staged=1
	if ! apply_knobs "$name" "$d"; then
		rc=3
		say "$name run $run: $(cat "$d/knob-error")"
	elif [ $staged = 1 ]; then
		snapshot "$d" scenario-before
		scenario start "$name" "$d" || {
			rc=4
			echo "scenario: $(tail -n 1 "$d/scenario.log")" > "$d/scenario-error"
			say "$name run $run: scenario stage failed"
		}
	fi
	if [ -z "${rc:-}" ]; then
		run_bench "$name" "$suite" "$d" "$tmo"
	fi
	[ $staged = 1 ] && scenario stop "$name" "$d"
	t1=$(uptime_s)
	e1=$(date +%s)
	printf 'rc %s\nstart_epoch %s\nend_epoch %s\nstart_uptime %s\nend_uptime %s\n' \
		"$rc" "$e0" "$e1" "$t0" "$t1" > "$d/status"
	say "$name run $run: rc=$rc elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')s"
	unset rc
}

run_bench() { # <name> <suite> <run dir> <timeout_s>; sets rc
	name=$1 suite=$2 d=$3 tmo=$4
	snapshot "$d" before
	funcprof_start "$d"
	perf_start "$d"
	(
		set -a
		. "$SB/jobs/$name.env"
		SB_BIN=$SB/bin SB_CASES=$SB/cases SB_WORK=/tmp/work SB_OUT=$d
		SB_MODULE=$SB/modules/stackbench_highalloc.ko
		set +a
		# SB_RUNNER (from the .env): an upstream suite's runner (jobs/benchmarks/suites.py)
		exec timeout -s KILL "$tmo" sh "$SB/guest/${SB_RUNNER:-run-$suite.sh}"
	) < /dev/null > "$d/output" 2> "$d/stderr"
	rc=$?
	perf_stop "$d"
	funcprof_stop "$d"
	snapshot "$d" after
}

say "guest up: $(uname -r), $(nproc) cpus, $(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo) kB"
cp $SB/plan $R/plan
dmesg > /tmp/dmesg-boot 2> /dev/null
save_knob_defaults
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
# a native run on a bare-metal box (jobs/executors/native.py): the host reads /results itself, and
# this is not the machine's init, so it must not reboot it
[ -e $SB/native ] && exit 0
send_results
reboot -f
