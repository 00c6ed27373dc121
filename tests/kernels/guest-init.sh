#!/bin/sh
# /init of the kernel-matrix VMs (run by busybox sh as PID 1 from the initramfs that
# `cargo xtask kernels` builds around one Debian kernel: busybox, iproute2, tcpreplay).
#
# The 9p share (mount tag "share") holds config.env, written by the harness:
#   RUNS="pmtu:name,name,... pmtu:name ..."   observer runs, each over one or more fixtures
#   OBSERVER=/share/bin/roce-observer          (its shared libraries in /share/lib)
#   FORCED="+frags ..."   features to pretend present (ROCE_OBSERVER_FEATURES), one observer
#                         start each: the load must fail with a clear message, kept in
#                         /share/out/forcedN.err and .rc
# For run N: a fresh veth pair aI <-> bI per fixture I of the run (MTU 9500, IPv6 off, so that
# only the replayed frames cross it), one observer attached to all of them (XDP ingress + TC
# egress), each fixture replayed by tcpreplay from /share/fixtures/NAME.pcap into its aI,
# SIGINT, and the observer's JSON, stderr and exit code written to /share/out/runN.json,
# .err, .rc. The observer loads once per run: under TCG loading takes tens of seconds. The host
# compares the records of each pair with its fixture's expected JSON. Last file: /share/out/done.

BB=/bin/busybox
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# Busybox's shell runs its own `ip` applet even when iproute2's is on PATH, and that applet's
# veth request is refused by 6.12: iproute2 is shipped as ip2.
IP=/usr/sbin/ip2

$BB mount -t proc proc /proc
$BB mount -t sysfs sysfs /sys
$BB mount -t devtmpfs devtmpfs /dev 2>/dev/null
$BB --install -s 2>/dev/null
mkdir -p /tmp /run /share /sys/fs/bpf
mount -t tmpfs tmpfs /tmp
mount -t bpf bpf /sys/fs/bpf 2>/dev/null

off() {
	sync
	[ -n "$1" ] && echo "kernels: $1" >/dev/console
	poweroff -f
	sleep 5
	echo o >/proc/sysrq-trigger
}

for m in virtio_pci 9pnet_virtio 9p veth sch_ingress cls_bpf; do
	modprobe "$m" 2>>/tmp/modprobe.log
done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none share /share ||
	off "cannot mount the 9p share: $(cat /tmp/modprobe.log)"
[ -r /share/config.env ] || off "no config.env in the share"
. /share/config.env
OUT=/share/out
mkdir -p $OUT
cp /tmp/modprobe.log $OUT/modprobe.log
uname -r >$OUT/uname
export LD_LIBRARY_PATH=/share/lib

n=0
for run in $RUNS; do
	pmtu=${run%%:*}
	names=$(echo "${run#*:}" | tr , ' ')
	out=$OUT/run$n
	ifaces=""
	i=0
	for name in $names; do
		$IP link add a$i mtu 9500 type veth peer name b$i mtu 9500 2>>$out.err
		for d in a$i b$i; do
			echo 1 >/proc/sys/net/ipv6/conf/$d/disable_ipv6
			$IP link set $d up
		done
		ifaces="$ifaces${ifaces:+,}a$i,b$i"
		i=$((i + 1))
	done
	$OBSERVER run -i "$ifaces" --no-tui --json --pmtu "$pmtu" $RUN_ARGS >$out.json 2>>$out.err &
	pid=$!
	# Loading under TCG takes tens of seconds (the verifier runs emulated): up to 300 s.
	t=0
	while ! grep -q attached $out.err 2>/dev/null; do
		kill -0 $pid 2>/dev/null || break
		t=$((t + 1))
		[ $t -gt 3000 ] && break
		sleep 0.1
	done
	if grep -q attached $out.err; then
		i=0
		for name in $names; do
			tcpreplay -q --topspeed -i a$i /share/fixtures/$name.pcap >>$out.replay 2>&1
			i=$((i + 1))
		done
		# Let the receiving veths' softirqs finish with the last frames.
		sleep 0.3
		kill -INT $pid
	else
		kill -KILL $pid 2>/dev/null
	fi
	wait $pid
	echo $? >$out.rc
	i=0
	for name in $names; do
		$IP link del a$i 2>/dev/null
		i=$((i + 1))
	done
	n=$((n + 1))
done
n=0
for f in $FORCED; do
	ROCE_OBSERVER_FEATURES=$f $OBSERVER run -i lo --no-tui --json >/dev/null 2>$OUT/forced$n.err &
	pid=$!
	t=0
	while kill -0 $pid 2>/dev/null && ! grep -q attached $OUT/forced$n.err; do
		t=$((t + 1))
		[ $t -gt 3000 ] && break
		sleep 0.1
	done
	# Still running (it loaded after all): stop it; the host reports that as a failure.
	kill -INT $pid 2>/dev/null
	wait $pid
	echo $? >$OUT/forced$n.rc
	n=$((n + 1))
done
dmesg >$OUT/dmesg.txt
echo ok >$OUT/done
sync
umount /share
off
