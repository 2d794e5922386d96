#!/usr/bin/env bash
# End to end on a real libvirtd and real QEMU guests (TCG: no KVM needed).
#  A. resexd's kvm backend finds a busy guest, reads its CPU time, pins a cap that shows in
#     `virsh schedinfo` and in the domain's cgroup and lowers the guest's CPU share, and puts
#     the original setting back when it stops; `resex kvm prepare` adds shared file memory and
#     the agent channel to a bare definition.
#  B. A guest runs the real agent (static `resex-agent --vm`: locked memory, guest-physical
#     page lists from /proc/self/pagemap) with BenchEx's server; `resex kvm hca` is its software
#     HCA, executing its rings in the domain's RAM file; the agent registers with resexd over
#     virtio-serial; BenchEx clients on the host load it; resexd's counts, read out of guest RAM,
#     equal exactly what the HCA executed, and its latency reports arrive.
# Everything it starts, it stops.
#
# Usage (root): tools/kvm/e2e.sh     (set RESEX_E2E_NO_INSTALL=1 to skip apt-get)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
URI=qemu:///system
DOM=resex-e2e
BARE=resex-e2e-bare
VMDOM=resex-e2e-vm
HCA_PID=
WORK=$(mktemp -d /tmp/resex-e2e.XXXXXX)
chmod 755 "$WORK"  # QEMU runs as libvirt-qemu and reads the initramfs from here
STARTED_LIBVIRTD=0
RESEXD_PID=
step() { echo "== e2e: $*"; }
fail() { echo "e2e FAILED: $*" >&2; exit 1; }

cleanup() {
    set +e
    [ -n "$RESEXD_PID" ] && kill "$RESEXD_PID" 2>/dev/null && wait "$RESEXD_PID" 2>/dev/null
    [ -n "$HCA_PID" ] && kill "$HCA_PID" 2>/dev/null && wait "$HCA_PID" 2>/dev/null
    for d in "$DOM" "$BARE" "$VMDOM"; do
        virsh -c $URI destroy "$d" >/dev/null 2>&1
        virsh -c $URI undefine "$d" >/dev/null 2>&1
    done
    if [ "$STARTED_LIBVIRTD" = 1 ]; then
        pkill -x libvirtd; pkill -x virtlogd
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || fail "run as root (libvirtd, cgroups)"
if [ "${RESEX_E2E_NO_INSTALL:-0}" != 1 ]; then
    step "installing qemu, libvirt, a kernel and busybox"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends qemu-system-x86 libvirt-daemon-system \
        libvirt-dev linux-image-amd64 busybox-static cpio >/dev/null
fi
KERNEL=$(ls /boot/vmlinuz-* | sort -V | tail -1)
export KVER=${KERNEL#/boot/vmlinuz-}  # the initramfs takes this kernel's modules

step "building resex and resexd with the libvirt feature, and a static resex-agent for the guest"
cargo build --release -q -p resex-cli -p resex-daemon --features resex-cli/libvirt,resex-daemon/libvirt
RUSTFLAGS='-C target-feature=+crt-static' cargo build --release -q -p resex-agent \
    --target x86_64-unknown-linux-gnu
AGENT=$ROOT/target/x86_64-unknown-linux-gnu/release/resex-agent
RESEX=$ROOT/target/release/resex
RESEXD=$ROOT/target/release/resexd

if ! virsh -c $URI version >/dev/null 2>&1; then
    step "starting virtlogd and libvirtd"
    virtlogd -d; libvirtd -d; STARTED_LIBVIRTD=1
    for _ in $(seq 50); do virsh -c $URI version >/dev/null 2>&1 && break; sleep 0.2; done
fi
virsh -c $URI version >/dev/null || fail "libvirtd does not answer at $URI"
for d in "$DOM" "$BARE" "$VMDOM"; do  # left by a run that was killed
    virsh -c $URI destroy "$d" >/dev/null 2>&1 || true
    virsh -c $URI undefine "$d" >/dev/null 2>&1 || true
done

step "guest image"
tools/kvm/initramfs.sh "$WORK/initrd.gz" "$AGENT"

domain_xml() { # NAME CMDLINE WITH_RESEX(0|1)
    local extra="" chans=""
    if [ "$3" = 1 ]; then
        extra="<memoryBacking><source type='file'/><access mode='shared'/></memoryBacking>"
        for c in org.resex.agent.0 org.resex.hca.0 org.resex.bench.0; do
            chans="$chans<channel type='unix'><source mode='bind'/><target type='virtio' name='$c'/></channel>"
        done
    fi
    cat <<XML
<domain type='qemu'>
  <name>$1</name>
  <memory unit='MiB'>192</memory>
  $extra
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><kernel>$KERNEL</kernel>
    <initrd>$WORK/initrd.gz</initrd><cmdline>console=ttyS0 quiet $2</cmdline></os>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <serial type='file'><source path='$WORK/$1.console'/></serial>
    $chans
  </devices>
</domain>
XML
}

step "resex kvm prepare on a bare definition"
domain_xml $BARE "resex.mode=busy" 0 > "$WORK/bare.xml"
virsh -c $URI define "$WORK/bare.xml" >/dev/null
"$RESEX" kvm prepare $BARE --connect $URI --define
virsh -c $URI dumpxml --inactive $BARE > "$WORK/bare-after.xml"
grep -q "<source type='file'/>" "$WORK/bare-after.xml" || fail "prepare: no file memory source"
grep -q "<access mode='shared'/>" "$WORK/bare-after.xml" || fail "prepare: no shared access"
grep -q "name='org.resex.agent.0'" "$WORK/bare-after.xml" || fail "prepare: no agent channel"
"$RESEX" kvm prepare $BARE --connect $URI 2>&1 | grep -q "already has" || fail "prepare is not idempotent"
virsh -c $URI undefine $BARE >/dev/null

step "starting the guest (TCG)"
domain_xml $DOM "resex.mode=busy" 0 > "$WORK/dom.xml"
virsh -c $URI define "$WORK/dom.xml" >/dev/null
"$RESEX" kvm prepare $DOM --connect $URI --define >/dev/null
virsh -c $URI start $DOM >/dev/null
for _ in $(seq 100); do grep -q "resex-guest: up" "$WORK/$DOM.console" 2>/dev/null && break; sleep 0.2; done
grep -q "resex-guest: up" "$WORK/$DOM.console" || fail "the guest did not boot: $(tail -5 "$WORK/$DOM.console")"
# The guest lists its ports just after "up"; under load the console file may lag a line behind.
for _ in $(seq 50); do grep -q "= org.resex.agent.0" "$WORK/$DOM.console" && break; sleep 0.2; done
grep -q "= org.resex.agent.0" "$WORK/$DOM.console" || fail "the guest has no org.resex.agent.0 port: $(tail -5 "$WORK/$DOM.console")"
CG=$(ls -d /sys/fs/cgroup/cpu/machine/qemu-*-$DOM.libvirt-qemu 2>/dev/null | head -1 || true)
[ -n "$CG" ] || CG=$(ls -d /sys/fs/cgroup/machine.slice/machine-qemu*$DOM*.scope 2>/dev/null | head -1 || true)
[ -n "$CG" ] || fail "no cgroup for $DOM"
ORIG=$(virsh -c $URI schedinfo $DOM | awk '/global_(period|quota)/ {print $3}' | tr '\n' ' ')

step "resexd --backend kvm"
API=$WORK/api.sock
"$RESEXD" --backend kvm --connect $URI --no-policy --api "$API" --state-dir "$WORK/state" \
    > "$WORK/resexd.log" 2>&1 &
RESEXD_PID=$!
status_json() { "$RESEX" status --api "$API" --json; }
CUR=$DOM  # the domain `field` looks at
field() { # JSON-FIELD: the current domain's value in the daemon's snapshot
    status_json | python3 -c "import json,sys; v=[x for x in json.load(sys.stdin)['vms'] if x['name']=='$CUR']; print(v[0]['$1'] if v else 'missing')"
}
for _ in $(seq 100); do [ "$(field name 2>/dev/null)" = "$DOM" ] && break; sleep 0.2; done
[ "$(field name)" = "$DOM" ] || fail "resexd did not find $DOM: $(tail -5 "$WORK/resexd.log")"
sleep 3
CPU0=$(field cpu_pct)
echo "   uncapped: guest CPU ${CPU0}% (the domain's cpu.time, virDomainGetCPUStats)"
python3 -c "import sys; sys.exit(0 if float('$CPU0') > 60 else 1)" || fail "an uncapped busy guest uses only ${CPU0}%"
grep -q "$DOM: found" "$WORK/resexd.log" || fail "no discovery line"

step "a cap of 25%: virsh schedinfo, the cgroup, and the guest's CPU share"
"$RESEX" cap $DOM 25 --api "$API"
# The actuator applies caps off the control loop: give it a moment.
SCHED=
for _ in $(seq 50); do
    SCHED=$(virsh -c $URI schedinfo $DOM | awk '/global_(period|quota)/ {print $3}' | tr '\n' ' ')
    [ "$SCHED" = "10000 2500 " ] && break
    sleep 0.2
done
[ "$SCHED" = "10000 2500 " ] || fail "schedinfo global_period/global_quota: '$SCHED' (want 10000 2500)"
if [ -f "$CG/cpu.cfs_quota_us" ]; then
    [ "$(cat "$CG/cpu.cfs_quota_us")" = 2500 ] || fail "cgroup v1 quota $(cat "$CG/cpu.cfs_quota_us")"
else
    grep -q "^2500 10000" "$CG/cpu.max" || fail "cgroup v2 cpu.max $(cat "$CG/cpu.max")"
fi
sleep 1
# The daemon's measurement, averaged over 3 s (one 100 ms window jitters by a few points).
CPU1=$(for _ in $(seq 15); do field cpu_pct; sleep 0.2; done | python3 -c "import sys; v=[float(x) for x in sys.stdin]; print(round(sum(v)/len(v), 1))")
echo "   capped at 25%: guest CPU ${CPU1}% (mean of 15 snapshots over 3 s)"
python3 -c "import sys; sys.exit(0 if 18 < float('$CPU1') < 29 else 1)" || fail "capped guest at ${CPU1}%"

step "resexd stops: the original setting comes back"
kill -TERM "$RESEXD_PID"; wait "$RESEXD_PID" || true; RESEXD_PID=
NOW=$(virsh -c $URI schedinfo $DOM | awk '/global_(period|quota)/ {print $3}' | tr '\n' ' ')
[ "$NOW" = "$ORIG" ] || fail "schedinfo after stop: '$NOW', before: '$ORIG'"
echo "   restored: global_period/global_quota = $NOW"
grep -q "1 caps restored" "$WORK/resexd.log" || fail "resexd's exit line: $(tail -1 "$WORK/resexd.log")"
virsh -c $URI destroy $DOM >/dev/null

step "B: a guest running the real agent (resex-agent --vm) and BenchEx's server"
domain_xml $VMDOM "resex.mode=agent" 1 > "$WORK/vm.xml"
virsh -c $URI create "$WORK/vm.xml" --paused >/dev/null
PEER_RAM=/dev/shm/resex-e2e-peer.$$.ram
"$RESEX" kvm hca $VMDOM --connect $URI --peer-ram "$PEER_RAM" --peer-hca "$WORK/peer.sock" \
    --stats "$WORK/hca.json" > "$WORK/hca.log" 2>&1 &
HCA_PID=$!
for _ in $(seq 50); do [ -S "$WORK/peer.sock" ] && break; sleep 0.2; done
[ -S "$WORK/peer.sock" ] || fail "resex kvm hca did not start: $(cat "$WORK/hca.log")"
virsh -c $URI resume $VMDOM >/dev/null
for _ in $(seq 150); do grep -q "vm mode:" "$WORK/$VMDOM.console" 2>/dev/null && break; sleep 0.2; done
grep -q "vm mode:" "$WORK/$VMDOM.console" || fail "the agent did not start: $(tail -5 "$WORK/$VMDOM.console")"
grep "vm mode:" "$WORK/$VMDOM.console" | sed 's/\x1b\[[0-9;]*m//g; s/^.*resex_agent::cli: /   guest: /'
"$RESEXD" --backend kvm --connect $URI --no-policy --api "$API" --state-dir "$WORK/state" \
    > "$WORK/resexd-vm.log" 2>&1 &
RESEXD_PID=$!
CUR=$VMDOM
for _ in $(seq 150); do [ "$(field state 2>/dev/null)" = registered ] && break; sleep 0.2; done
[ "$(field state)" = registered ] || fail "the agent did not register: $(tail -5 "$WORK/resexd-vm.log"; tail -5 "$WORK/$VMDOM.console")"
BENCH=$(virsh -c $URI dumpxml $VMDOM | grep -o "path='[^']*org.resex.bench.0'" | cut -d"'" -f2)
N=200
"$RESEX" benchex client --ram "$PEER_RAM" --hca "$WORK/peer.sock" --connect "$BENCH" \
    --count $N --rate 200 --duration 0 || fail "benchex client"
sleep 2
TOTALS=$(status_json | python3 -c "import json,sys; v=[x for x in json.load(sys.stdin)['vms'] if x['name']=='$VMDOM'][0]; print(v['mtus_total'], v['tx_bytes_total'], v['wqes_total'], v['reports'], v['errors'] + v['overruns'] + v['anomalies'])")
kill -TERM "$HCA_PID"; wait "$HCA_PID" || true; HCA_PID=
TRUTH=$(python3 -c "import json; s=json.load(open('$WORK/hca.json')); print(s['mtus'], s['tx_bytes'], s['wqes'])")
read -r MTUS BYTES WQES REPORTS FAULTS <<< "$TOTALS"
echo "   resexd counted: $MTUS MTUs, $BYTES bytes, $WQES WQEs, $REPORTS latency reports, $FAULTS faults"
echo "   softhca executed: $TRUTH (MTUs, bytes, WQEs)"
[ "$MTUS $BYTES $WQES" = "$TRUTH" ] || fail "the daemon's counts differ from what the HCA executed"
# N replies of 64 KiB + 8 header bytes, and a 1-byte status write each.
[ "$BYTES" = $((N * (65536 + 8) + N)) ] || fail "unexpected bytes $BYTES for $N orders"
[ "$REPORTS" -gt 0 ] && [ "$FAULTS" = 0 ] || fail "reports $REPORTS, faults $FAULTS"
kill -TERM "$RESEXD_PID"; wait "$RESEXD_PID" || true; RESEXD_PID=
step "passed"
