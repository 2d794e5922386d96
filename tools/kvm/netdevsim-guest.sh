#!/bin/sh
# Runs inside the netdevsim test guest (busybox sh; see tools/kvm/netdevsim.sh): resexd's VF
# rate lever against the kernel's netdevsim driver, checked with the real devlink and ip.
# Every line it prints starts with "nsim: "; the last is "nsim: PASSED" or "nsim: FAILED: why".
RUN=/run/resex
API=$RUN/resexd.sock
CONF=/etc/resex/resexd.toml
LOG=/tmp/resexd.log
RESEXD_PID=
# Full paths: busybox's shell runs its own applets first (it has an `ip` of its own).
IP=/bin/ip
DEVLINK=/bin/devlink
say() { echo "nsim: $*"; }
fail() {
    say "FAILED: $*"
    [ -f "$LOG" ] && sed 's/^/nsim: resexd| /' "$LOG" | grep -v 'vf::wire' | tail -25
    wire
    exit 1
}
# resexd's netlink bytes (resex.trace=1 on the kernel command line).
wire() { [ $trace = 1 ] && grep 'vf::wire' $LOG | sed 's/^.*vf::wire: /nsim: wire: /'; }
trace=0
for a in $(cat /proc/cmdline); do case "$a" in resex.trace=1) trace=1 ;; esac; done

# until SECONDS COMMAND...: retries COMMAND every 0.2 s for SECONDS.
until_ok() {
    n=$(($1 * 5)); shift
    while [ "$n" -gt 0 ]; do "$@" >/dev/null 2>&1 && return 0; n=$((n - 1)); sleep 0.2; done
    return 1
}

mkdir -p $RUN /var/lib/resex /etc/resex /tmp
DL=netdevsim/netdevsim1          # switchdev mode: devlink rate
LEAF=$DL/128                     # VF 0's eswitch port (netdevsim numbers VF ports from 128)
say "devices: $DL (switchdev, devlink rate) and netdevsim/netdevsim2 (legacy, IFLA_VF_RATE)"
echo "1 1" > /sys/bus/netdevsim/new_device || fail "netdevsim: new_device 1"
echo "2 1" > /sys/bus/netdevsim/new_device || fail "netdevsim: new_device 2"
until_ok 10 test -e /sys/bus/netdevsim/devices/netdevsim2/net || fail "netdevsim2 has no netdev"
for d in 1 2; do
    echo 2 > /sys/bus/netdevsim/devices/netdevsim$d/sriov_numvfs || fail "sriov_numvfs on netdevsim$d"
done
$DEVLINK dev eswitch set $DL mode switchdev || fail "switchdev mode on $DL"
PF2=$(ls /sys/bus/netdevsim/devices/netdevsim2/net | head -1)
say "legacy PF netdev: $PF2; kernel $(uname -r); $($IP -V | head -1), $($DEVLINK -V)"

# The settings before resexd (what it must put back).
$DEVLINK port function rate set $LEAF tx_share 100mbit || fail "devlink rate set (original)"
$IP link set dev "$PF2" vf 1 min_tx_rate 10 max_tx_rate 100 || fail "ip link set vf (original)"
leaf() { $DEVLINK port function rate show $LEAF; }
vf1() { $IP link show dev "$PF2" | grep "vf 1 "; }
say "original, devlink: $(leaf)"
say "original, ip link: $(vf1 | sed 's/^ *//')"

# Three "VMs" (sleeping processes): vm-dl's record names its VF; vm-legacy's VF comes from
# resexd's [rates.vfs]; vm-none has none.
publish() { # ID NAME VF_JSON
    sleep 100000 &
    pid=$!
    dd if=/dev/zero of=$RUN/$2.ram bs=1M count=1 2>/dev/null
    mkdir -p $RUN/local/domains
    vf=""; [ -n "$3" ] && vf=", \"vf\": $3"
    cat > $RUN/local/domains/nsim-$2.json <<EOF
{"id": $1, "name": "$2", "host": "nsim", "vcpus": 1, "ram_file": "$RUN/$2.ram",
 "ram_size": 1048576, "pid": $pid, "cpu": {"proc": $pid}, "cap": {"sigstop": $pid},
 "channel": "$RUN/$2.sock"$vf}
EOF
}
publish 1 vm-dl '{"kind": "function", "devlink": "netdevsim/netdevsim1", "vf": 0}'
publish 2 vm-legacy ""
publish 3 vm-none ""
config() { # VF_LEVER
    cat > $CONF <<EOF
backend = "local"
run_dir = "$RUN"
state_dir = "/var/lib/resex"
api_socket = "$API"
realtime = false
[rates]
vf_lever = "$1"
[rates.vfs]
vm-legacy = { kind = "function", devlink = "netdevsim/netdevsim2", vf = 1 }
EOF
}
start() {
    filter=info
    [ $trace = 1 ] && filter=info,resex_backend::vf=debug,resex_backend::vf::wire=trace
    NO_COLOR=1 RUST_LOG=$filter resexd --config $CONF --no-policy >> $LOG 2>&1 &
    RESEXD_PID=$!
    until_ok 20 sh -c "resex status --api $API | grep -q vm-legacy" || fail "resexd did not list the VMs"
}
rate() { resex rate "$@" --api $API 2>&1 | sed 's/^/nsim: resex rate: /'; }
config auto
start
# What auto chose for each VM (the snapshot's lever), as `resex status --json` shows it.
levers=$(resex status --api $API --json | grep -o '"tx_lever": *"[^"]*"' | sed 's/"tx_lever": *//')
say "levers: $(echo $levers)"
echo "$levers" | grep -q '"devlink rate netdevsim/netdevsim1/128 (VF 0 of netdevsim/netdevsim1)"' \
    || fail "vm-dl's lever is not devlink rate on netdevsim/netdevsim1/128"
echo "$levers" | grep -q "\"VF rate on $PF2 vf 1 (IFLA_VF_RATE, VF 1 of netdevsim/netdevsim2)\"" \
    || fail "vm-legacy's lever is not the legacy VF rate on $PF2"
until_ok 5 grep -q "no rate lever for VM nsim/vm-none" $LOG || fail "no 'no rate lever' line for vm-none"
say "resexd: $(grep -o 'no rate lever for VM nsim/vm-none.*' $LOG | head -1)"
[ "$(grep -c 'no rate lever for VM nsim/vm-none' $LOG)" = 1 ] || fail "the 'no rate lever' line is not said once"
rate vm-none --max 1Gbit

say "-- pinned: share 500Mbit, max 2Gbit on both"
rate vm-dl --share 500Mbit --max 2Gbit
rate vm-legacy --share 500Mbit --max 2Gbit
until_ok 10 sh -c "$DEVLINK port function rate show $LEAF | grep -q 'tx_share 500Mbit tx_max 2Gbit'" \
    || fail "devlink shows '$(leaf)', want tx_share 500Mbit tx_max 2Gbit"
until_ok 10 sh -c "$IP link show dev $PF2 | grep 'vf 1 ' | grep -q 'max_tx_rate 2000Mbps, min_tx_rate 500Mbps'" \
    || fail "ip link shows '$(vf1)', want max_tx_rate 2000Mbps, min_tx_rate 500Mbps"
say "kernel, devlink: $(leaf)"
say "kernel, ip link: $(vf1 | grep -o 'max_tx_rate.*')"

say "-- kill -9 resexd: the limits outlive it"
kill -9 $RESEXD_PID; wait $RESEXD_PID 2>/dev/null
leaf | grep -q 'tx_share 500Mbit tx_max 2Gbit' || fail "after kill -9, devlink shows '$(leaf)'"
vf1 | grep -q 'max_tx_rate 2000Mbps, min_tx_rate 500Mbps' || fail "after kill -9, ip link shows '$(vf1)'"
say "after kill -9, devlink: $(leaf)"
say "after kill -9, ip link: $(vf1 | grep -o 'max_tx_rate.*')"
grep -q '"original"' /var/lib/resex/rates.json || fail "no originals recorded in rates.json"
say "rates.json: $(tr -d ' \n' < /var/lib/resex/rates.json | head -c 400)"

say "-- resexd restarts: the originals come back"
start
until_ok 10 sh -c "$DEVLINK port function rate show $LEAF | grep -q 'tx_share 100Mbit\$'" \
    || fail "after the restart, devlink shows '$(leaf)', want tx_share 100Mbit alone"
until_ok 10 sh -c "$IP link show dev $PF2 | grep 'vf 1 ' | grep -q 'max_tx_rate 100Mbps, min_tx_rate 10Mbps'" \
    || fail "after the restart, ip link shows '$(vf1)'"
say "restored, devlink: $(leaf)"
say "restored, ip link: $(vf1 | grep -o 'max_tx_rate.*')"
say "resexd: $(grep -o 'restored [0-9]* transmit limits.*' $LOG | tail -1)"

say "-- unsupported values: one clear line each"
errors() { grep -c "transmit limit change for nsim/$1/[0-9]* failed" $LOG; }
rate vm-dl --share 500500kbit --max 2Gbit
until_ok 10 sh -c "[ \$(grep -c 'transmit limit change for nsim/vm-dl/[0-9]* failed' $LOG) -ge 1 ]" \
    || fail "no error for tx_share 500.5Mbit on netdevsim"
rate vm-legacy --max 300kbit
until_ok 10 sh -c "[ \$(grep -c 'transmit limit change for nsim/vm-legacy/[0-9]* failed' $LOG) -ge 1 ]" \
    || fail "no error for max 300kbit on the legacy VF rate"
sleep 2
[ "$(errors vm-dl)" = 1 ] || fail "$(errors vm-dl) error lines for vm-dl, want 1"
[ "$(errors vm-legacy)" = 1 ] || fail "$(errors vm-legacy) error lines for vm-legacy, want 1"
grep -q 'tx_share 62562500 B/s (500.5Mbit) refused: EINVAL (Invalid argument): .*TX rate value not in link speed units of 1Mbps' $LOG \
    || fail "the devlink refusal does not carry the kernel's message"
say "resexd: $(grep -o 'transmit limit change for nsim/vm-dl.*' $LOG)"
say "resexd: $(grep -o 'transmit limit change for nsim/vm-legacy.*' $LOG)"
leaf | grep -q 'tx_share 100Mbit$' || fail "a refused setting changed the leaf: '$(leaf)'"

say "-- resexd stops (SIGTERM): nothing of its own is left"
kill -TERM $RESEXD_PID; wait $RESEXD_PID
leaf | grep -q 'tx_share 100Mbit$' || fail "after SIGTERM devlink shows '$(leaf)'"
vf1 | grep -q 'max_tx_rate 100Mbps, min_tx_rate 10Mbps' || fail "after SIGTERM ip link shows '$(vf1)'"

say "-- vf_lever = legacy on the switchdev device: the kernel's refusal in one line"
config legacy
start
rate vm-dl --max 1Gbit
until_ok 10 sh -c "[ \$(grep -c 'transmit limit change for nsim/vm-dl/[0-9]* failed' $LOG) -ge 2 ]" \
    || fail "no error for the legacy VF rate in switchdev mode"
sleep 1
[ "$(errors vm-dl)" = 2 ] || fail "$(errors vm-dl) error lines for vm-dl, want 2"
grep -q 'IFLA_VF_RATE on .* refused: EOPNOTSUPP' $LOG || fail "the legacy refusal is not EOPNOTSUPP"
say "resexd: $(grep -o 'transmit limit change for nsim/vm-dl.*EOPNOTSUPP.*' $LOG)"
kill -TERM $RESEXD_PID; wait $RESEXD_PID
leaf | grep -q 'tx_share 100Mbit$' || fail "at the end devlink shows '$(leaf)'"
wire
say "PASSED"
