#!/bin/bash
# /sbin/stackbench-init: PID 1 of the Debian image when it is the root disk (root=/dev/vda
# init=/sbin/stackbench-init), without systemd so that a tinyconfig-based kernel boots it
# in seconds under TCG. Installed by jobs/benchmarks/guest/image.py; jobs that only chroot into the
# image (run-thpscale-mmtests.sh) never run it.
#
# Kernel command line:
#   sb.check      print the versions of the tools the image exists for, then power off
#   sb.net        bring up eth0 as QEMU's user network does it (10.0.2.15/24 via 10.0.2.2)
#   sb.sshd       start sshd (host keys are made on first boot)
#   sb.seed=DEV   mount DEV (ext4) read-only at /mnt/seed and run its seed.sh in the
#                 background on every boot (the VM that plays a bare-metal box gets its
#                 ssh key, stackbench and its boot-time job runner this way)
#   sb.run=PATH   run PATH (a script in the image), then power off
# Without sb.run the init stays up (a box waiting for ssh) until `busybox reboot -f`.

export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2> /dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -o remount,rw /
hostname -F /etc/hostname

arg() { # value of sb.<name>=, "1" for a bare sb.<name>, nothing when absent
	for w in $(cat /proc/cmdline); do
		case "$w" in
		"sb.$1") echo 1 ;;
		"sb.$1="*) echo "${w#sb.$1=}" ;;
		esac
	done
}

echo "stackbench-image: up on $(uname -r)"
if [ -n "$(arg check)" ]; then
	echo "stackbench-image: bash $BASH_VERSION"
	echo "stackbench-image: $(perl -e 'print "perl $^V"')"
	echo "stackbench-image: $(python3 --version)"
	echo "stackbench-image: $(kexec --version 2>&1 | head -n 1)"
	echo "stackbench-image: $(sshd -V 2>&1 | head -n 1)"
	echo "stackbench-image: mmtests tools: $(command -v gawk bc numactl time chroot | tr '\n' ' ')"
	echo "stackbench-image: check done"
	sync
	busybox reboot -f
fi
if [ -n "$(arg net)" ]; then
	ip link set lo up
	ip link set eth0 up
	ip addr add 10.0.2.15/24 dev eth0
	ip route add default via 10.0.2.2
	echo "stackbench-image: network up"
fi
if [ -n "$(arg sshd)" ]; then
	ssh-keygen -A > /dev/null
	mkdir -p /run/sshd
	/usr/sbin/sshd && echo "stackbench-image: sshd up"
fi
seed=$(arg seed)
if [ -n "$seed" ]; then
	mkdir -p /mnt/seed
	if mount -o ro "$seed" /mnt/seed && [ -x /mnt/seed/seed.sh ]; then
		/mnt/seed/seed.sh > /dev/console 2>&1 < /dev/null &
		echo "stackbench-image: seed $seed started"
	else
		echo "stackbench-image: no seed.sh on $seed"
	fi
fi
run=$(arg run)
if [ -n "$run" ]; then
	"$run"
	echo "stackbench-image: $run exited $?"
	sync
	busybox reboot -f
fi
# stay up: reap orphans as PID 1 must
while :; do
	wait
	sleep 1
done
