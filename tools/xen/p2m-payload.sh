#!/bin/sh
# dom0 payload: a PV domU locks two pages (pinned_probe, the agent's PinnedMemory), writes a text
# into each and prints their addresses from its /proc/self/pagemap (pseudo-physical: a PV
# guest's frames are not machine frames); dom0 reads each text back at that address with
# `resex xen peek`, through the domU's p2m as resexd's xen backend reads guest rings.
# Prints XEN-P2M lines and XEN-PAYLOAD-OK when both pages read back.
fail() { echo "XEN-FAIL $*"; exit 1; }
xl create /domu/domu.cfg > /tmp/xl-create.log 2>&1 || { cat /tmp/xl-create.log; fail "xl create"; }
log=/var/log/xen/console/guest-domu.log
for _ in $(seq 240); do grep -q 'resex-probe: page 1' "$log" 2>/dev/null && break; sleep 0.5; done
grep -q 'resex-probe: page 1' "$log" 2>/dev/null || { tail -5 "$log"; fail "the domU's probe printed no page"; }
ok=0
for i in 0 1; do
    line=$(grep -m1 "resex-probe: page $i " "$log" | tr -d '\r')
    gpa=$(echo "$line" | sed 's/.*gpa=\([0-9a-fx]*\).*/\1/')
    want=$(echo "$line" | sed 's/.*text=//')
    got=$(resex xen peek domu "$gpa" --len 64 --text 2>&1)
    echo "XEN-P2M page $i: the domU wrote '$want' at pseudo-physical $gpa; dom0 read '$got'"
    [ "$got" = "$want" ] && ok=$((ok + 1))
done
resex xen peek domu "$gpa" --len 32 | sed 's/^/XEN-P2M dump: /'
xl destroy domu
[ "$ok" = 2 ] || fail "dom0 did not read the domU's text at the address the domU gave"
echo "XEN-P2M ok: 2 of 2 pages read back through the p2m"
echo "XEN-PAYLOAD-OK"
