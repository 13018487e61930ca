#!/bin/sh
# The scenario stage before a benchmark (jobs/benchmarks/knobs.py): fragment memory, hold a hogger, run
# a background load, then give kcompactd SETTLE_S seconds. Everything it starts keeps running
# through the benchmark and is stopped by `scenario.sh stop` after it.
#
# In: start|stop, SCENARIO (none, fill-free-3of4, spread-N-movable|unmovable), HOGGER_MB,
#     BGLOAD (none, compile), SETTLE_S, SB_BIN, SB_WORK, SB_OUT.
set -u

pids=/tmp/scenario.pids
stopfile=/tmp/scenario.stop
# seconds a stage may take to set up before the run fails (a full fill under TCG is slow)
SETUP_TIMEOUT_S=600

wait_ready() { # <ready file> <pid> <what>
	i=0
	while [ ! -e "$1" ]; do
		if ! kill -0 "$2" 2> /dev/null; then
			echo "scenario: $3 exited before it was ready" >&2
			return 1
		fi
		i=$((i + 1))
		if [ $i -gt $((SETUP_TIMEOUT_S * 5)) ]; then
			echo "scenario: $3 not ready after ${SETUP_TIMEOUT_S}s" >&2
			return 1
		fi
		sleep 0.2
	done
}

hold() { # <what> <fragment args...>: start a holder, wait until its memory is set up
	what=$1
	shift
	ready=/tmp/scenario.ready.$what
	rm -f "$ready"
	"$SB_BIN/fragment" "$@" "$ready" &
	pid=$!
	echo "$pid" >> $pids
	wait_ready "$ready" "$pid" "$what"
}

start() {
	: > $pids
	rm -f $stopfile
	t0=$(cut -d' ' -f1 /proc/uptime)
	case "$SCENARIO" in
	none) ;;
	fill-free-3of4) hold fill "fill-free" 128 || return 1 ;;
	spread-*-movable | spread-*-unmovable)
		pct=${SCENARIO#spread-}
		kind=${pct#*-}
		pct=${pct%%-*}
		hold spread spread "$pct" "$kind" || return 1
		;;
	*)
		echo "scenario: unknown scenario $SCENARIO" >&2
		return 1
		;;
	esac
	if [ "$HOGGER_MB" -gt 0 ]; then
		hold hogger hog "$HOGGER_MB" || return 1
	fi
	case "$BGLOAD" in
	none) ;;
	compile)
		mkdir -p "$SB_WORK/bgload"
		"$SB_BIN/fragment" churn "$(nproc)" 16 "$SB_WORK/bgload/stop" &
		echo "$!" >> $pids
		;;
	*)
		echo "scenario: unknown background load $BGLOAD" >&2
		return 1
		;;
	esac
	t1=$(cut -d' ' -f1 /proc/uptime)
	echo "scenario: set up in $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')s"
	[ "$SETTLE_S" -gt 0 ] && sleep "$SETTLE_S"
	return 0
}

stop() {
	[ -d "$SB_WORK/bgload" ] && touch "$SB_WORK/bgload/stop"
	[ -r $pids ] || return 0
	for pid in $(cat $pids); do
		kill -TERM "$pid" 2> /dev/null
	done
	for pid in $(cat $pids); do
		i=0
		# an exited holder may stay a zombie until /init reaps it
		while kill -0 "$pid" 2> /dev/null && [ $i -lt 50 ] &&
			! grep -q '^State:.*Z' /proc/$pid/status 2> /dev/null; do
			sleep 0.2
			i=$((i + 1))
		done
		kill -KILL "$pid" 2> /dev/null
	done
	rm -f $pids
	echo "scenario: stopped"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
*)
	echo "usage: scenario.sh start|stop" >&2
	exit 2
	;;
esac
