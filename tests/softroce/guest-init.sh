#!/bin/sh
# /init of the Soft-RoCE test VMs (run by busybox sh as PID 1 from the initramfs
# that `cargo xtask softroce` builds out of this machine's Debian packages).
#
# Each VM gets its own virtio 9p share (mount tag "share") holding config.env, a
# shell fragment written by the harness:
#   ROLE=server|client  MY_IP=192.0.2.x  PEER_IP=192.0.2.y  MTU=1500|9000
#   PERFTEST=ib_write_bw  PERFTEST_ARGS="-s 8192 -n 100"  (both roles; -d/-x/server are added here)
#   LOSS=""|"2%"          netem loss on this VM's eth0 egress (requester side)
#   NETEM=""|"delay 1ms reorder 30% 25% limit 100000"  netem with these arguments on this VM's
#                         eth0 egress (the reorder scenarios; either VM)
#   CAPTURE=0|1           tcpdump on eth0 into cap.pcap
#   PRE_CAPTURE=0|1       also capture before the egress qdisc (netem) into pre.pcap: a clsact
#                         egress matchall filter mirrors eth0's packets to a dummy device
#   EXTRA_CMD="..."       optional command run in the background while perftest runs
#                         (e.g. the observer: /share/extra/roce-observer run -i eth0 --no-tui --json),
#                         stdout/stderr to extra.out/extra.err, stopped with SIGINT afterwards
#   EXTRA_WAIT=2          seconds to give EXTRA_CMD to attach before perftest starts
#   EXTRA_READY="attached" optional: start perftest as soon as extra.err/out matches it
#                         (EXTRA_WAIT is then the upper bound)
#   PERFTEST_TIMEOUT=600  hard limit for the perftest process
#   SHIFT_QPN=1           server: a loopback perftest first, so its QP numbers differ from the client's
#   SLOW_QPN=18 SLOW_DELAY=30ms  optional: netem delay on this VM's egress packets whose BTH
#                         destination QP is SLOW_QPN only (a prio band with netem under it, chosen
#                         by a u32 filter); the steps scenarios' straggler
#   EXPECT_QPS=1          client: how many connected QPs perftest creates (-q), for the rdma poll
# Everything the VM produces is written back into the share; the last file is
# status.env (PERFTEST_RC=..., ...). The VM then powers off (qemu runs with
# -no-reboot and panic=1, and the harness wraps qemu in a hard timeout too).

BB=/bin/busybox
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# Busybox's shell prefers its own applets: call iproute2 / Debian tools by path.
IP=/usr/sbin/ip
TC=/usr/sbin/tc
RDMA=/usr/bin/rdma
TCPDUMP=/usr/bin/tcpdump

$BB mount -t proc proc /proc
$BB mount -t sysfs sysfs /sys
$BB mount -t devtmpfs devtmpfs /dev 2>/dev/null
$BB --install -s 2>/dev/null
mkdir -p /tmp /run /share /dev/pts /sys/fs/bpf
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null

t0=$(cut -d' ' -f1 /proc/uptime)

die_off() {
	sync
	[ -n "$1" ] && echo "softroce: $1" >/dev/console
	poweroff -f
	sleep 5
	echo o >/proc/sysrq-trigger
}

log() { echo "softroce[$(cut -d' ' -f1 /proc/uptime)] $*" | tee -a /tmp/init.log >/dev/console; }

# Modules first: 9p for the share, virtio-net, Soft-RoCE (+ crc32_generic, without which
# `rdma link add` fails with ENOENT), netem for loss, and the modules the observer needs
# for its TC egress program (clsact qdisc = sch_ingress, cls_bpf).
for m in virtio_pci virtio_net 9pnet_virtio 9p crc32_generic ib_uverbs rdma_rxe \
	sch_netem sch_ingress cls_bpf dummy cls_matchall act_mirred sch_prio cls_u32; do
	modprobe "$m" 2>>/tmp/init.log || log "modprobe $m failed"
done

if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none share /share; then
	die_off "cannot mount the 9p share"
fi
OUT=/share
[ -r $OUT/config.env ] || die_off "no config.env in the share"
. $OUT/config.env
: "${ROLE:=client}" "${MTU:=1500}" "${PERFTEST:=ib_write_bw}" "${EXTRA_WAIT:=2}"
: "${PERFTEST_TIMEOUT:=600}" "${READY_PORT:=4000}" "${CAPTURE:=0}"
log "role=$ROLE ip=$MY_IP peer=$PEER_IP mtu=$MTU cmd=$PERFTEST $PERFTEST_ARGS loss=${LOSS:-none} booted_at=${t0}s"

status() { echo "$1" >>/tmp/status.env; }
finish() {
	status "T_END=$(cut -d' ' -f1 /proc/uptime)"
	dmesg >$OUT/dmesg.txt 2>&1
	cp /tmp/init.log $OUT/init.log 2>/dev/null
	cp /tmp/status.env $OUT/status.env
	sync
	umount /share 2>/dev/null
	die_off "done"
}
status "T_BOOT=$t0"
status "KERNEL=$(uname -r)"

# ---- network ----
$IP link set lo up
$IP link set eth0 mtu "$MTU" || log "cannot set mtu $MTU"
# The two capture points of PRE_CAPTURE start seconds apart (tcpdump is slow under TCG): no
# IPv6 on eth0, so that nothing (router solicitations, MLD reports) is sent in between.
if [ "${PRE_CAPTURE:-0}" = 1 ]; then
	echo 1 >/proc/sys/net/ipv6/conf/eth0/disable_ipv6 || log "cannot disable IPv6 on eth0"
fi
$IP addr add "$MY_IP/24" dev eth0
$IP link set eth0 up
# wait for carrier
i=0
while [ "$(cat /sys/class/net/eth0/operstate 2>/dev/null)" != up ] && [ $i -lt 50 ]; do
	sleep 0.2; i=$((i + 1))
done

# ---- Soft-RoCE ----
if ! $RDMA link add rxe0 type rxe netdev eth0 2>>/tmp/init.log; then
	log "rdma link add failed"; status "ERROR=rdma_link_add"; finish
fi
PORT=/sys/class/infiniband/rxe0/ports/1
GID_IDX=""
i=0
while [ -z "$GID_IDX" ] && [ $i -lt 100 ]; do
	for g in $PORT/gids/*; do
		if grep -q 'ffff:c000' "$g" 2>/dev/null; then GID_IDX=${g##*/}; break; fi
	done
	[ -z "$GID_IDX" ] && sleep 0.1
	i=$((i + 1))
done
[ -n "$GID_IDX" ] || { log "no IPv4 GID"; status "ERROR=no_ipv4_gid"; finish; }
status "GID_INDEX=$GID_IDX"
status "GID=$(cat $PORT/gids/$GID_IDX)"
status "ACTIVE_MTU=$(cat $PORT/active_mtu 2>/dev/null | tr -d ' ')"
$RDMA link show >$OUT/rdma-link.txt 2>&1

snap_counters() {
	for f in $PORT/hw_counters/*; do echo "${f##*/}=$(cat "$f")"; done >"$1"
}

# Wait until TCP port $1 listens, at most $3 tenths of a second, or until process $2 exits.
wait_listening() {
	i=0
	until netstat -ltn 2>/dev/null | grep -q ":$1 "; do
		sleep 0.1; i=$((i + 1))
		[ $i -ge "$3" ] && break
		kill -0 "$2" 2>/dev/null || break
	done
}

# Shift the server's QP numbers: a loopback perftest (its two QPs created and destroyed; rxe
# numbers QPs cyclically and loopback never reaches eth0) before the counters are read, so the
# server's perftest QP is not number 17 like the client's and the observer's owner check can
# tell the local QP (lqpn) from the remote one (rqpn). SHIFT_QPN=0 skips it.
if [ "$ROLE" = server ] && [ "${SHIFT_QPN:-1}" = 1 ]; then
	LB=/usr/bin/ib_write_bw
	status "T_SHIFT_START=$(cut -d' ' -f1 /proc/uptime)"
	timeout 60 $LB -d rxe0 -x "$GID_IDX" -p 18600 -n 5 -s 64 >/tmp/shift-server.out 2>&1 &
	LB_PID=$!
	wait_listening 18600 $LB_PID 300
	timeout 60 $LB -d rxe0 -x "$GID_IDX" -p 18600 -n 5 -s 64 "$MY_IP" >/tmp/shift-client.out 2>&1
	wait $LB_PID
	status "QPN_SHIFT_RC=$?"
	status "T_SHIFT_END=$(cut -d' ' -f1 /proc/uptime)"
	cat /tmp/shift-server.out /tmp/shift-client.out >>/tmp/init.log
fi
snap_counters $OUT/counters_before.txt

# ---- one QP slowed (steps scenarios): every egress packet goes to band 1:1 (priomap all 0)
# but those whose BTH destination QP is SLOW_QPN, which a u32 filter sends to band 1:4, where
# netem delays them. The offset assumes what rxe sends: IPv4 without options (20 bytes), UDP (8),
# then the BTH, whose bytes 5-7 are the destination QP: the 32-bit word at IP offset 32, masked
# to 24 bits. The filter only matches UDP to port 4791 (RoCEv2), so perftest's TCP is never
# delayed. ----
if [ -n "${SLOW_QPN:-}" ]; then
	if $TC qdisc add dev eth0 root handle 1: prio bands 4 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 \
		2>>/tmp/init.log &&
		$TC qdisc add dev eth0 parent 1:4 handle 40: netem delay "$SLOW_DELAY" limit 100000 \
		2>>/tmp/init.log &&
		$TC filter add dev eth0 parent 1: protocol ip prio 1 u32 \
		match ip protocol 17 0xff match ip dport 4791 0xffff \
		match u32 "$(printf '0x%08x' "$SLOW_QPN")" 0x00ffffff at 32 flowid 1:4 2>>/tmp/init.log; then
		status "SLOW_SETUP=ok"
	else
		log "slow QP setup failed"; status "SLOW_SETUP=failed"
	fi
fi

# ---- rendezvous: the server listens on the perftest port, then says "ready" ----
PERF_PORT=18515
if [ "$ROLE" = server ]; then
	:
else
	# wait until the server answers on the ready port (its perftest is listening by then)
	i=0
	while [ $i -lt 600 ]; do
		r=$(nc "$PEER_IP" "$READY_PORT" </dev/null 2>/dev/null)
		[ "$r" = ready ] && break
		sleep 0.5; i=$((i + 1))
	done
	[ "$r" = ready ] || { log "server never became ready"; status "ERROR=no_rendezvous"; finish; }
	status "T_READY=$(cut -d' ' -f1 /proc/uptime)"
fi

# ---- pre-qdisc capture point (before netem): clsact egress runs before the root qdisc, so a
# matchall filter there (pref 1, ahead of the observer's filter; "continue" so that the
# observer's filter still runs) mirrors every eth0 egress packet to a dummy device, captured
# there; cap.pcap (after netem) is the point after it. Started before netem and cap.pcap's
# tcpdump, stopped before it: eth0 is quiet then, so both see the same packets but netem's ----
PRE_PID=""
if [ "${PRE_CAPTURE:-0}" = 1 ]; then
	if $IP link add pre0 type dummy 2>>/tmp/init.log && $IP link set pre0 mtu "$MTU" &&
		$IP link set pre0 up && $TC qdisc add dev eth0 clsact 2>>/tmp/init.log &&
		$TC filter add dev eth0 egress pref 1 matchall \
		action mirred egress mirror dev pre0 continue 2>>/tmp/init.log; then
		$TCPDUMP -Z root -n -i pre0 -B 16384 -w /tmp/pre.pcap 2>/tmp/tcpdump-pre.err &
		PRE_PID=$!
		i=0
		until grep -q 'listening on' /tmp/tcpdump-pre.err 2>/dev/null || [ $i -ge 100 ]; do
			sleep 0.1; i=$((i + 1))
		done
		status "T_PRE_CAPTURE=$(cut -d' ' -f1 /proc/uptime)"
	else
		log "pre-qdisc capture setup failed"; status "PRE_CAPTURE_ERROR=setup"
	fi
fi

# ---- loss (netem on this VM's egress; the capture point is after the qdisc) ----
if [ -n "$LOSS" ]; then
	$TC qdisc add dev eth0 root netem loss "$LOSS" 2>>/tmp/init.log || log "netem failed"
fi
if [ -n "${NETEM:-}" ]; then
	# shellcheck disable=SC2086 # netem's arguments, split on purpose
	$TC qdisc add dev eth0 root netem $NETEM 2>>/tmp/init.log || log "netem $NETEM failed"
fi

# ---- capture ----
TCPDUMP_PID=""
if [ "$CAPTURE" = 1 ]; then
	$TCPDUMP -Z root -n -i eth0 -B 16384 -w /tmp/cap.pcap 2>/tmp/tcpdump.err &
	TCPDUMP_PID=$!
	i=0
	until grep -q 'listening on' /tmp/tcpdump.err 2>/dev/null || [ $i -ge 100 ]; do
		sleep 0.1; i=$((i + 1))
	done
	status "T_CAPTURE=$(cut -d' ' -f1 /proc/uptime)"
fi

# ---- optional extra command (e.g. the observer), output into the share ----
EXTRA_PID=""
if [ -n "$EXTRA_CMD" ]; then
	[ -d /share/extra/lib ] && export LD_LIBRARY_PATH=/share/extra/lib
	sh -c "$EXTRA_CMD" >$OUT/extra.out 2>$OUT/extra.err &
	EXTRA_PID=$!
	unset LD_LIBRARY_PATH
	if [ -n "$EXTRA_READY" ]; then
		# wait (at most EXTRA_WAIT s) until the command says it is ready, e.g. "attached"
		i=0; seen=0
		while [ $i -lt $((EXTRA_WAIT * 10)) ]; do
			if grep -q "$EXTRA_READY" $OUT/extra.err $OUT/extra.out 2>/dev/null; then seen=1; break; fi
			kill -0 $EXTRA_PID 2>/dev/null || break
			sleep 0.1; i=$((i + 1))
		done
		status "EXTRA_READY_SEEN=$seen"
	else
		sleep "$EXTRA_WAIT"
	fi
	status "T_EXTRA_STARTED=$(cut -d' ' -f1 /proc/uptime)"
fi

# ---- perftest ----
PERF_BIN=/usr/bin/$PERFTEST
status "T_PERF_START=$(cut -d' ' -f1 /proc/uptime)"
if [ "$ROLE" = server ]; then
	timeout "$PERFTEST_TIMEOUT" $PERF_BIN -d rxe0 -x "$GID_IDX" -F $PERFTEST_ARGS >$OUT/perftest.out 2>&1 &
	PERF_PID=$!
	wait_listening "$PERF_PORT" $PERF_PID 600
	# one-shot "ready" answer for the client (busybox nc as a server)
	(echo ready | nc -l -p "$READY_PORT" >/dev/null 2>&1) &
	READY_PID=$!
	wait $PERF_PID
	PERF_RC=$?
	kill $READY_PID 2>/dev/null
else
	timeout "$PERFTEST_TIMEOUT" $PERF_BIN -d rxe0 -x "$GID_IDX" -F $PERFTEST_ARGS "$PEER_IP" >$OUT/perftest.out 2>&1 &
	PERF_PID=$!
	# Ground truth for the observer's QP owners, independent of it: the perftest process as
	# /proc names it, and iproute2's `rdma resource show qp` once perftest's QP is connected
	# (a user QP, one with a pid, whose rqpn is set: 0 before RTR; the kernel's GSI QP has
	# none). Polled while perftest runs; costs no extra VM time.
	i=0
	while kill -0 $PERF_PID 2>/dev/null && [ $i -lt 600 ]; do
		if $RDMA -j resource show qp >/tmp/rdma-qp.json 2>>/tmp/init.log &&
			grep -q '"pid"' /tmp/rdma-qp.json &&
			[ "$(grep -o '"rqpn":[1-9]' /tmp/rdma-qp.json | wc -l)" -ge "${EXPECT_QPS:-1}" ]; then
			cp /tmp/rdma-qp.json $OUT/rdma-qp.json
			status "PERF_PIDOF=$(pidof "$PERFTEST")"
			status "PERF_COMM=$(cat /proc/"$(pidof "$PERFTEST")"/comm 2>/dev/null)"
			break
		fi
		sleep 0.1; i=$((i + 1))
	done
	wait $PERF_PID
	PERF_RC=$?
fi
status "T_PERF_END=$(cut -d' ' -f1 /proc/uptime)"
status "PERFTEST_RC=$PERF_RC"
log "perftest rc=$PERF_RC"
# let the last ACKs / retransmissions drain before the counters are read
sleep 1

# Closing rendezvous, so that the capture (client) covers everything counted on both sides:
# the server reads its counters first, then answers "done"; the client reads its counters
# and stops tcpdump only after that answer (it crossed the same FIFO link after any RoCE
# packet the server had sent).
if [ "$ROLE" = server ]; then
	snap_counters $OUT/counters_after.txt
	status "T_COUNTERS=$(cut -d' ' -f1 /proc/uptime)"
	(echo done | nc -l -p "$((READY_PORT + 1))" >/dev/null 2>&1) &
	DONE_PID=$!
	i=0
	while kill -0 $DONE_PID 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
	kill $DONE_PID 2>/dev/null && status "DONE_RENDEZVOUS=timeout"
else
	i=0
	while [ $i -lt 120 ]; do
		r=$(nc "$PEER_IP" "$((READY_PORT + 1))" </dev/null 2>/dev/null)
		[ "$r" = done ] && break
		sleep 0.5; i=$((i + 1))
	done
	[ "$r" = done ] || status "DONE_RENDEZVOUS=timeout"
	snap_counters $OUT/counters_after.txt
	status "T_COUNTERS=$(cut -d' ' -f1 /proc/uptime)"
fi

if [ -n "$EXTRA_PID" ]; then
	# SIGINT first (Ctrl-C), then SIGTERM, then SIGKILL. A background job of a
	# non-interactive shell starts with SIGINT ignored: programs that install their own
	# handler (the observer does) still get it, others stop at SIGTERM. 30 s each: after a
	# go-back-N storm (the reorder scenarios, ~40,000 packets) on a loaded host the observer
	# took over 10 s to print its document after SIGINT.
	for sig in INT TERM KILL; do
		kill -$sig $EXTRA_PID 2>/dev/null || break
		status "EXTRA_SIGNAL=$sig"
		i=0
		while kill -0 $EXTRA_PID 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
		kill -0 $EXTRA_PID 2>/dev/null || break
	done
	wait $EXTRA_PID
	status "EXTRA_RC=$?"
fi

if [ -n "$PRE_PID" ]; then
	# tcpdump reads its ring a block at a time (blocks close after 1 s): stopped sooner after
	# the last packets it loses them (read_bw_mtu1500_loss2: 153 received by filter, 148
	# captured). --immediate-mode instead drops packets under TCG (173 in one run).
	sleep 1.2
	kill -INT $PRE_PID
	wait $PRE_PID
	cp /tmp/pre.pcap $OUT/pre.pcap
	cp /tmp/tcpdump-pre.err $OUT/tcpdump-pre.err
fi
if [ -n "$TCPDUMP_PID" ]; then
	kill -INT $TCPDUMP_PID
	wait $TCPDUMP_PID
	cp /tmp/cap.pcap $OUT/cap.pcap
	cp /tmp/tcpdump.err $OUT/tcpdump.err
fi
[ -n "$LOSS" ] && $TC -s qdisc show dev eth0 >$OUT/qdisc.txt 2>&1
[ -n "${NETEM:-}" ] && $TC -s qdisc show dev eth0 >$OUT/qdisc.txt 2>&1
if [ -n "${SLOW_QPN:-}" ]; then
	$TC -s qdisc show dev eth0 >$OUT/qdisc.txt 2>&1
	$TC -s filter show dev eth0 >$OUT/filter.txt 2>&1
fi
cat /proc/net/dev >$OUT/netdev.txt
$IP -s link show dev eth0 >$OUT/link.txt 2>&1
finish
