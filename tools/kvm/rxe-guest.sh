#!/bin/sh
# Runs inside the soft-RoCE test guest (busybox sh; see tools/kvm/rxe.sh): the kernel's rdma_rxe
# on the guest's virtio-net eth0, and Debian's unmodified perftest, server and client in this
# same guest talking to its own address (the packets go through rxe's UDP path, not the wire).
# Every line meant for the host starts with "resex-rxe: "; perftest's own lines are passed on as
# "resex-rxe: run N server| ..." and "resex-rxe: run N client| ...". The last line is
# "resex-rxe: done" (also after a failed run: the host judges the figures).
#
# Kernel command line knobs (all optional):
#   resex.rxe_wait=N  sleep N seconds after `rdma link add` and before perftest, so that a host
#                     daemon (resexd --backend kvm) can attach to the guest first
#   resex.name=NAME   the guest's hostname, also the name the agent registers with
#   resex.rxe_hold=N  after each run, sleep N seconds (the host reads the daemon's totals then)
say() { echo "resex-rxe: $*"; }
# Full paths: busybox's shell runs its own applets first.
RDMA=/bin/rdma
ADDR=10.0.2.15      # slirp's default guest address (QEMU user networking)
DEV=rxe0
wait_s=0
hold_s=0
name=resex-rxe
for a in $(cat /proc/cmdline); do
    case "$a" in
        resex.rxe_wait=*) wait_s=${a#resex.rxe_wait=} ;;
        resex.name=*) name=${a#resex.name=} ;;
        resex.rxe_hold=*) hold_s=${a#resex.rxe_hold=} ;;
    esac
done
hostname "$name"
mkdir -p /tmp /run

say "kernel $(uname -r), $(grep -c ^processor /proc/cpuinfo) CPU(s), $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(grep -m1 'cpu MHz' /proc/cpuinfo | sed 's/.*: //') MHz, clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
ip link set lo up
ip link set eth0 up || { say "FAILED: no eth0 ($(ls /sys/class/net | tr '\n' ' '))"; say done; exit 1; }
ip addr add $ADDR/24 dev eth0
ip route add default via 10.0.2.2 dev eth0 2>/dev/null
say "eth0: $(cat /sys/class/net/eth0/address), $ADDR/24, mtu $(cat /sys/class/net/eth0/mtu)"

# The soft-RoCE device on eth0 (rdma_rxe is loaded; `rdma link add` is the iproute2 way, the
# old /sys/module/rdma_rxe/parameters/add is gone from 5.x kernels).
$RDMA link add $DEV type rxe netdev eth0 || { say "FAILED: rdma link add"; say done; exit 1; }
$RDMA link show | sed 's/^/resex-rxe: rdma| /'
# The RoCE v2 GID of $ADDR appears once the netdev's address is seen by ib_core.
i=0
while [ $i -lt 50 ]; do
    grep -q . /sys/class/infiniband/$DEV/ports/1/gids/1 2>/dev/null && \
        [ "$(cat /sys/class/infiniband/$DEV/ports/1/gids/1)" != "0000:0000:0000:0000:0000:0000:0000:0000" ] && break
    sleep 0.1; i=$((i + 1))
done
for g in 0 1; do
    say "gid $g: $(cat /sys/class/infiniband/$DEV/ports/1/gids/$g 2>/dev/null)" \
        "($(cat /sys/class/infiniband/$DEV/ports/1/gid_attrs/types/$g 2>/dev/null))"
done

# Hook: the guest agent, if the image has one, discovers perftest's queues (uverbs mappings)
# and registers them with the host daemon over the org.resex.agent.0 port.
AGENT_PID=
if [ -x /bin/resex-agent ]; then
    RUST_LOG=info NO_COLOR=1 /bin/resex-agent --vm --discover --channel org.resex.agent.0 \
        --name "$(hostname)" > /tmp/agent.log 2>&1 &
    AGENT_PID=$!
    sleep 1
    if kill -0 $AGENT_PID 2>/dev/null; then
        say "agent: running (pid $AGENT_PID)"
    else
        wait $AGENT_PID; rc=$?
        say "agent: exited at once with status $rc"
        sed 's/^/resex-rxe: agent| /' /tmp/agent.log | head -20
        AGENT_PID=
    fi
else
    say "agent: none in the image"
fi

if [ "$wait_s" -gt 0 ] 2>/dev/null; then
    say "waiting $wait_s s (resex.rxe_wait) before perftest"
    sleep "$wait_s"
fi

# run N PORT PERFTEST ARGS...: a server in the background and a client against $ADDR, both on
# $DEV, each bounded by a timeout; their outputs go to the console, prefixed.
run() {
    n=$1; port=$2; shift 2
    say "run $n start: $*"
    timeout 600 "$@" -p "$port" > /tmp/server.$n 2>&1 &
    spid=$!
    # The client gives up at once if nobody listens yet: wait for the server's TCP socket
    # (perftest exchanges QP numbers, GIDs and rkeys over TCP before any RDMA).
    i=0
    while [ $i -lt 100 ] && ! netstat -ltn 2>/dev/null | grep -q ":$port "; do
        sleep 0.1; i=$((i + 1))
    done
    timeout 600 "$@" -p "$port" $ADDR > /tmp/client.$n 2>&1
    crc=$?
    wait $spid
    src=$?
    sed "s/^/resex-rxe: run $n server| /" /tmp/server.$n
    sed "s/^/resex-rxe: run $n client| /" /tmp/client.$n
    # rxe's port counters so far (cumulative over the runs; the host takes the differences).
    say "run $n counters: $(counters)"
    say "run $n end: server status $src, client status $crc"
    hold
}
hold() { [ "$hold_s" -gt 0 ] 2>/dev/null && sleep "$hold_s"; return 0; }
counters() { $RDMA statistic show link $DEV/1 2>/dev/null | tr -s ' ' | sed 's/^link [^ ]* //'; }
run 1 18515 ib_write_bw -d $DEV -s 65536 -n 2000 -F --report_gbits
run 2 18516 ib_send_bw -d $DEV -s 4096 -n 2000 -F --report_gbits
run 3 18517 ib_write_lat -d $DEV -s 64 -n 2000 -F
# Run 4: a perftest killed mid-run (SIGKILL, no clean-up of its own): its queues must be
# unregistered and nothing else may notice.
say "run 4 start: ib_write_bw -d $DEV -s 65536 -D 60, the client killed after 5 s"
ib_write_bw -d $DEV -s 65536 -D 60 -F -p 18518 > /tmp/server.4 2>&1 &
spid=$!
i=0
while [ $i -lt 100 ] && ! netstat -ltn 2>/dev/null | grep -q ":18518 "; do sleep 0.1; i=$((i + 1)); done
ib_write_bw -d $DEV -s 65536 -D 60 -F -p 18518 $ADDR > /tmp/client.4 2>&1 &
cpid=$!
sleep 5
if kill -0 $cpid 2>/dev/null; then
    kill -9 $cpid $spid 2>/dev/null
    wait $cpid 2>/dev/null; wait $spid 2>/dev/null
    say "run 4 killed while running: client and server (SIGKILL) after 5 s"
else
    kill -9 $spid 2>/dev/null; wait $spid 2>/dev/null
    say "run 4: the client had exited before the kill (no kill mid-run)"
fi
sleep 2
say "run 4 end"
hold
# Run 5: READ latency. The client posts one READ at a time and polls for its completion, and
# the server only waits: the round trip perftest reports is the READ's own time in the queue
# pair, what the host's latency estimate measures.
run 5 18519 ib_read_lat -d $DEV -s 64 -n 100000 -F

if [ -n "$AGENT_PID" ]; then
    kill $AGENT_PID 2>/dev/null; wait $AGENT_PID
    say "agent: stopped"
    sed 's/^/resex-rxe: agent| /' /tmp/agent.log | tail -20
fi
say done
