#!/bin/sh
# dom0 payload of tools/xen/cap-demo.sh (runs as /payload.sh in the nested Xen host's dom0):
# creates the spinning PV domU, measures it uncapped, caps it at CAP% with the running
# scheduler's xl command (sched-credit2 or sched-credit), and measures its CPU time from
# `xl list` (Time(s)) over WINDOW seconds, and with xentop. Prints XEN-* lines; the last ones are
#   XEN-CAP sched=credit2 cap=25 xl_shows=25 measured=25.3% xentop=24.8% uncapped=99.1%
#   XEN-PAYLOAD-OK
CAP=${CAP:-25}
WINDOW=${WINDOW:-20}
fail() { echo "XEN-FAIL $*"; exit 1; }
xl info | grep -E 'xen_version|xen_scheduler' | sed 's/^/XEN-INFO /'
sched=$(xl info | awk '$1 == "xen_scheduler" { print $3 }')
case "$sched" in
    credit2) cmd=sched-credit2 ;;
    credit) cmd=sched-credit ;;
    *) fail "scheduler '$sched' has no cap" ;;
esac

xl create /domu/domu.cfg > /tmp/xl-create.log 2>&1 || { cat /tmp/xl-create.log; fail "xl create"; }
echo "XEN-CREATED domu (xl create /domu/domu.cfg)"
domu_time() { xl list domu 2>/dev/null | awk '$1 == "domu" { print $6 }'; }
now() { cut -d' ' -f1 /proc/uptime; }
# PCT over SECONDS: the domU's CPU time (xl list) against dom0's clock, in percent.
measure() {
    t0=$(domu_time); u0=$(now)
    sleep "$1"
    t1=$(domu_time); u1=$(now)
    awk -v a="$t0" -v b="$t1" -v s="$u0" -v e="$u1" 'BEGIN { printf "%.1f", 100 * (b - a) / (e - s) }'
}
# Running: its init's first line is in its console log (xenconsoled --log=guest).
log=/var/log/xen/console/guest-domu.log
for _ in $(seq 240); do grep -q 'xen-domu: up' "$log" 2>/dev/null && break; sleep 0.5; done
grep -q 'xen-domu: up' "$log" 2>/dev/null || { xl list; tail -5 "$log"; fail "the domU did not start"; }
echo "XEN-RUNNING domU console: $(grep -m1 'xen-domu: up' "$log" | tr -d '\r')"
echo "XEN-RUNNING xl list: $(xl list domu | awk '$1 == "domu"')"
uncapped=$(measure 10)
echo "XEN-UNCAPPED measured=${uncapped}% over 10 s"

xl $cmd -d domu -c "$CAP" || fail "xl $cmd -d domu -c $CAP"
xl $cmd -d domu | sed "s/^/XEN-SCHED xl $cmd -d domu: /"
shows=$(xl $cmd -d domu | awk '$1 == "domu" { print $4 }')
sleep 1
measured=$(measure "$WINDOW")
echo "XEN-MEASURED ${measured}% of a CPU over ${WINDOW} s (xl list Time(s))"
top=$(xentop -b -i 2 -d 5 | awk '$1 == "domu"' | tail -1)
echo "XEN-XENTOP $top"
xentop_pct=$(echo "$top" | awk '{ print $4 }')
echo "XEN-CAP sched=$sched cap=$CAP xl_shows=$shows measured=${measured}% xentop=${xentop_pct}% uncapped=${uncapped}%"
xl destroy domu
echo "XEN-PAYLOAD-OK"
