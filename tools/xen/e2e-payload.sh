#!/bin/sh
# dom0 payload of tools/xen/e2e.sh (runs as /payload.sh in the nested Xen host's dom0, with
# resexd and resex in /bin; busybox only, no python). With the spinning PV domU `domu`:
#  1. resexd --backend xen --no-policy finds domu (`resex status`), reads its CPU (~100%);
#  2. `resex cap domu CAP`: xl sched-credit2/sched-credit shows Cap CAP, and domu's CPU from
#     `xl list` Time(s) over WINDOW s is within 10% (relative) of CAP; xentop and resexd's own
#     cpu_pct for it are printed (resexd's: the median of 50 snapshots uncapped must be
#     100 +- 25, the mean of 50 capped CAP +- 50%: single snapshots scatter widely here);
#  3. kill -9 while capped: xl still shows CAP; `resexd --restore` puts 0 back; a new resexd
#     caps again and on SIGTERM exits at once restoring 0 ("1 caps restored");
#  4. a new resexd caps domu, then `xl destroy domu`: resexd lives on, drops domu from its
#     snapshots within 5 s of xl destroy returning (never lists it again), logs `domu: gone`,
#     forgets its cap record, logs at most 4 lines about domu in the 12 s after (no error
#     spam), and exits cleanly.
#  5. the agent in a second PV domU `domv` (/domu/domv.cfg, built by initramfs.sh with
#     DOMV_RUN: `resex-agent --vm --xen --name domv --listen xs:bench`): `resex xen hca domv` is
#     its software HCA (its pages mapped through xenforeignmemory), with a host-side peer and
#     BenchEx's bootstrap relayed from xenstore (`xs:bench`) to a Unix socket; the agent reaches
#     it ("vm mode:" on domv's console) and registers with a new resexd over xenstore
#     (`resex status`: registered); `resex benchex client` sends ORDERS orders through the
#     peer; resexd's totals for domv (mtus_total, tx_bytes_total, wqes_total) equal exactly what
#     the HCA executed (its --stats JSON at SIGTERM: mtus, tx_bytes, wqes), the bytes are
#     ORDERS * (65536 + 8) + ORDERS (a 64 KiB reply with its 8-byte header and a 1-byte status
#     write per order), reports > 0 and errors + overruns + anomalies = 0.
# dom0's vCPUs are pinned to pCPU 0 and each domU to pCPU 1 (see below).
# MODE=short (the credit boot may use it) runs 1, 2 and the SIGTERM restore of 3.
# Prints XEN-* lines; a failed check is a `XEN-FAIL ...` line; at the end the whole logs of the
# resexds, of the HCA and domv's console, as `resexd-N| LINE`, `xen-hca| LINE` and
# `guest-domv| LINE` (tools/xen/e2e.sh keeps them); the last lines are
#   XEN-COUNTS resexd mtus=.. bytes=.. wqes=.. reports=.. faults=.. hca mtus=.. bytes=.. wqes=..
#   XEN-E2E sched=credit2 cap=25 xl=25 measured=24.8% ... failed_checks=0 counts=equal reports=N
#   XEN-PAYLOAD-OK                      (only when every check passed)
CAP=${CAP:-25}
WINDOW=${WINDOW:-20}
MODE=${MODE:-full}
ORDERS=${ORDERS:-100}
API=/run/resex.sock
STATE=/var/lib/resex
ESC=$(printf '\033')
RESEXD_PID=
HCA_PID=
LOG=
BAD=0
export NO_COLOR=1

now() { cut -d' ' -f1 /proc/uptime; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# resexd's log (or a console log) without colours and carriage returns.
clean() { tr -d '\r' < "$1" | sed "s/${ESC}\[[0-9;]*m//g"; }
logtail() { [ -n "$LOG" ] && clean "$LOG" | tail -${1:-8} | sed 's/^/XEN-LOG | /'; }
bad() { echo "XEN-FAIL $*"; BAD=$((BAD + 1)); }
stop_resexd() {
    [ -n "$RESEXD_PID" ] || return 0
    kill -TERM "$RESEXD_PID" 2>/dev/null; wait "$RESEXD_PID" 2>/dev/null; RESEXD_PID=
}
# Stops step 5's HCA (SIGTERM: it writes its stats), with kill -9 if it has not exited 20 s
# later; its exit status in HCA_RC.
HCA_RC=-
stop_hca() {
    [ -n "$HCA_PID" ] || return 0
    kill -TERM "$HCA_PID" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$HCA_PID" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$HCA_PID" 2>/dev/null; then
        echo "XEN-FAIL resex xen hca did not exit within 20 s of SIGTERM"; BAD=$((BAD + 1))
        kill -9 "$HCA_PID"
    fi
    wait "$HCA_PID" 2>/dev/null; HCA_RC=$?; HCA_PID=
}
fail() { echo "XEN-FAIL $*"; logtail 15; stop_resexd; stop_hca; exit 1; }

# ---- the scheduler, the domU ----------------------------------------------------------------
xl info | grep -E 'xen_version|xen_scheduler' | sed 's/^/XEN-INFO /'
sched=$(xl info | awk '$1 == "xen_scheduler" { print $3 }')
case "$sched" in
    credit2) cmd=sched-credit2 ;;
    credit) cmd=sched-credit ;;
    *) fail "scheduler '$sched' has no cap" ;;
esac
# The domU alone on pCPU 1, dom0 (resexd, xl, the toolstack) on pCPU 0: under TCG resexd's
# 1 ms loop, its CPU sampling and its xenstore polling cost a dom0 vCPU or more, which would
# otherwise take pCPU time from the measured domU (uncapped it got ~70%, capped at 25 ~21%).
xl vcpu-pin Domain-0 all 0 || fail "xl vcpu-pin Domain-0 all 0"
{ cat /domu/domu.cfg; echo 'cpus = "1"'; } > /tmp/domu.cfg
xl create /tmp/domu.cfg > /tmp/xl-create.log 2>&1 || { cat /tmp/xl-create.log; fail "xl create"; }
clog=/var/log/xen/console/guest-domu.log
for _ in $(seq 240); do grep -q 'xen-domu: up' "$clog" 2>/dev/null && break; sleep 0.5; done
grep -q 'xen-domu: up' "$clog" 2>/dev/null || { xl list; tail -5 "$clog"; fail "the domU did not start"; }
echo "XEN-RUNNING xl list: $(xl list domu | awk '$1 == "domu"')"
DOMID=$(xl domid domu)
echo "XEN-VCPUS $(xl vcpu-list | awk 'NR > 1 { printf "%s/%s on pCPU %s (affinity %s); ", $1, $3, $4, $7 }')"

xl_cap() { xl $cmd -d domu 2>/dev/null | awk '$1 == "domu" { print $4 }'; }
# VALUE SECONDS: until xl shows the cap VALUE; prints what it shows last.
wait_xl_cap() {
    for _ in $(seq $(($2 * 5))); do [ "$(xl_cap)" = "$1" ] && break; sleep 0.2; done
    xl_cap
}
dom_time() { xl list "$1" 2>/dev/null | awk -v d="$1" '$1 == d { print $6 }'; }
# "CLOCK HALF TIME": dom0's clock at the middle of an `xl list` call (which takes a second or
# more in a busy TCG dom0), half the call's duration, and the domU's CPU seconds (Time(s)).
stamp() { a=$(now); t=$(dom_time domu); b=$(now); echo "$a $b $t" | awk '{ printf "%.3f %.3f %s", ($1 + $2) / 2, ($2 - $1) / 2, $3 }'; }
# The domU's CPU over SECONDS of dom0's clock, percent of one CPU, and the bound on its
# relative error from when in each xl call Xen was asked (plus Time(s)'s 0.1 s steps), percent:
# "PCT ERR".
measure() {
    s0=$(stamp); sleep "$1"; s1=$(stamp)
    echo "$s0 $s1" | awk '{ w = $4 - $1; u = $6 - $3; printf "%.1f %.0f", 100 * u / w, 100 * (($2 + $5) / w + 0.1 / (u > 0.1 ? u : 0.1)) }'
}

# ---- resexd ---------------------------------------------------------------------------------
start_resexd() { # LOGFILE
    LOG=$1
    resexd --backend xen --no-policy --api $API --state-dir $STATE > "$LOG" 2>&1 &
    RESEXD_PID=$!
}
# The VM object NAME of `resex status --json` (empty: not listed). Each VM's object starts
# with its id; the host's does not.
vm_json() {
    resex status --api $API --json 2>/dev/null | sed 's/{"id":/\n{"id":/g' | grep "\"name\":\"$1\""
}
jfield() { # JSON FIELD: FIELD's value in JSON, a VM object of vm_json (numbers, null, or a string's text)
    echo "$1" | sed -n "s/.*\"$2\":\"\{0,1\}\([^,}\"]*\).*/\1/p"
}
field() { # FIELD [VM]: the VM's value (default domu) in a new `resex status`
    jfield "$(vm_json "${2:-domu}")" "$1"
}
# SECONDS: until resexd lists domu (fails when resexd dies first).
wait_found() {
    for _ in $(seq $(($1 * 5))); do
        [ -n "$(vm_json domu)" ] && return 0
        kill -0 "$RESEXD_PID" 2>/dev/null || return 1
        sleep 0.2
    done
    return 1
}
# N: resexd's cpu_pct for domu in N consecutive snapshots (100 ms each) streamed by one
# `resex top` (a `resex status` per snapshot takes seconds in a busy TCG dom0), as
# "MEDIAN MEAN MIN MAX". Each snapshot's figure is CPU time over resexd's sample clock between
# two samples ~100 ms apart; in a saturated TCG dom0 its samples come late and irregularly,
# so single figures scatter widely (and their mean leans high): the median is the check.
cpu_stats() {
    resex top --api $API --batch --json --interval 100 --count "$1" 2>/dev/null \
        | sed 's/{"id":/\n{"id":/g' | grep '"name":"domu"' | sed -n 's/.*"cpu_pct":\([^,}]*\).*/\1/p' \
        | grep -v null | sort -n > /tmp/cpu-samples.txt
    echo "XEN-CPU-SAMPLES resexd cpu_pct, sorted: $(awk '{ printf "%.0f ", $1 }' /tmp/cpu-samples.txt)" >&2
    awk '{ v[NR] = $1; s += $1 } END {
        if (!NR) { print "none none none none"; exit }
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%.1f %.1f %.1f %.1f", m, s / NR, v[1], v[NR] }' /tmp/cpu-samples.txt
}
within() { # VALUE WANT FRACTION: |VALUE - WANT| <= FRACTION * WANT
    awk -v v="$1" -v w="$2" -v f="$3" 'BEGIN { d = v - w; if (d < 0) d = -d; exit !(v != "" && d <= f * w) }'
}
cpu_secs() { # PID: its user + system CPU, seconds
    awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$1/stat" 2>/dev/null
}
threads() { # PID: each thread's CPU seconds
    for t in /proc/$1/task/*; do
        awk '{ gsub(/[()]/, "", $2); printf "%s=%.1fs ", $2, ($14 + $15) / 100 }' "$t/stat" 2>/dev/null
    done
}

# ---- 1. discovery and CPU -------------------------------------------------------------------
echo "XEN-STEP 1: resexd --backend xen --no-policy finds domu (domid $DOMID) and reads its CPU"
start_resexd /tmp/resexd-1.log
T_START=$(now); D0_START=$(dom_time Domain-0)
wait_found 90 || fail "resexd did not list domu within 90 s (alive: $(kill -0 "$RESEXD_PID" 2>/dev/null && echo yes || echo no))"
echo "XEN-FOUND in $(elapsed "$T_START") s: $(clean "$LOG" | grep -m1 'domu: found' | sed 's/^.*resex_daemon::sampler: //')"
clean "$LOG" | grep -q 'domu: found' || bad "no 'domu: found' line in resexd's log"
mech=$(field cap_mechanism)
[ "$mech" = "xen $sched cap" ] || bad "cap_mechanism '$mech', want 'xen $sched cap'"
echo "XEN-STATUS $(resex status --api $API | grep -E '^ *(VM|domu) ' | tr -s ' ' | head -2 | tr '\n' '|')"
sleep 2
set -- $(cpu_stats 50); cpu0=$1
echo "XEN-UNCAPPED resexd cpu_pct median ${1}% (mean $2, min $3, max $4 of 50 snapshots), xl list $(measure 10 | awk '{ printf "%s%% (+-%s%%)", $1, $2 }') over 10 s; vcpus $(field vcpus), state $(field state), cap_pct $(field cap_pct)"
within "$cpu0" 100 0.25 || bad "uncapped: resexd's cpu_pct median $cpu0 (want 100 +- 25)"

# ---- 2. the cap -----------------------------------------------------------------------------
echo "XEN-STEP 2: resex cap domu $CAP"
resex cap domu "$CAP" --api $API || bad "resex cap domu $CAP failed"
shows=$(wait_xl_cap "$CAP" 10)
xl $cmd -d domu | sed "s/^/XEN-SCHED xl $cmd -d domu: /"
[ "$shows" = "$CAP" ] || bad "xl $cmd shows cap '$shows', want $CAP"
cap_pct=$(field cap_pct)
within "$cap_pct" "$CAP" 0.001 || bad "resex status cap_pct '$cap_pct', want $CAP"
sleep 1
set -- $(measure "$WINDOW"); measured=$1
echo "XEN-MEASURED ${measured}% of a CPU over $WINDOW s (xl list Time(s); timing uncertainty +-$2% of it)"
within "$measured" "$CAP" 0.1 || bad "measured ${measured}%, not within 10% of the cap $CAP"
# Capped, the domU's own use is lumpy at 100 ms (credit parks it for whole 30 ms accounting
# periods): the mean is the figure, and a sanity check only (xl's measurement is the check).
set -- $(cpu_stats 50); cpu1=$2
echo "XEN-RESEXD capped: resexd cpu_pct mean ${2}% (median $1, min $3, max $4 of 50 snapshots), cap_pct $cap_pct"
within "$cpu1" "$CAP" 0.5 || bad "capped: resexd's cpu_pct mean $cpu1 (want $CAP +- 50%)"
top=$(xentop -b -i 2 -d 5 | awk '$1 == "domu"' | tail -1)
echo "XEN-XENTOP $top"
xentop_pct=$(echo "$top" | awk '{ print $4 }')
echo "XEN-STATE caps.json: $(cat $STATE/caps.json 2>/dev/null | tr -d '\n' | cut -c1-300)"
RUN_S=$(elapsed "$T_START")
RCPU=$(cpu_secs "$RESEXD_PID")
dom0_pct=$(awk -v c="$RCPU" -v t="$RUN_S" 'BEGIN { printf "%.1f", 100 * c / t }')
d0=$(awk -v a="$D0_START" -v b="$(dom_time Domain-0)" -v t="$RUN_S" 'BEGIN { printf "%.0f", 100 * (b - a) / t }')
echo "XEN-RESEXD-COST resexd used ${RCPU} s of dom0 CPU in ${RUN_S} s (${dom0_pct}% of one dom0 vCPU as dom0 accounts it; dom0 as a whole ran ${d0}% of its pCPU): $(threads "$RESEXD_PID")"

kill9=- after_restore=- restore_term=- term_s=- dropped=- gone_s=-
if [ "$MODE" = full ]; then
    # ---- 3a. kill -9, then resexd --restore ----------------------------------------------------
    echo "XEN-STEP 3: kill -9 resexd while domu is capped, then resexd --restore"
    kill -9 "$RESEXD_PID"; wait "$RESEXD_PID" 2>/dev/null; RESEXD_PID=
    sleep 0.5
    kill9=$(xl_cap)
    echo "XEN-KILL9 xl $cmd shows cap $kill9 after kill -9 (resexd cannot restore: the cap stays)"
    [ "$kill9" = "$CAP" ] || bad "after kill -9 xl shows cap '$kill9', want $CAP still"
    resexd --backend xen --restore --state-dir $STATE > /tmp/resexd-restore.log 2>&1
    rc=$?
    clean /tmp/resexd-restore.log | sed 's/^/XEN-LOG restore | /'
    after_restore=$(xl_cap)
    echo "XEN-RESTORE resexd --restore exit $rc; xl $cmd shows cap $after_restore"
    [ "$rc" = 0 ] || bad "resexd --restore exited $rc"
    [ "$after_restore" = 0 ] || bad "after resexd --restore xl shows cap '$after_restore', want 0"
    clean /tmp/resexd-restore.log | grep -q 'restored 1 caps' || bad "resexd --restore did not say 'restored 1 caps'"
fi

# ---- 3b. SIGTERM restores -----------------------------------------------------------------------
echo "XEN-STEP 3b: a new resexd caps domu again; SIGTERM"
if [ -n "$RESEXD_PID" ]; then  # short mode: the first resexd is still running
    :
else
    start_resexd /tmp/resexd-2.log
    wait_found 60 || fail "the second resexd did not list domu"
    resex cap domu "$CAP" --api $API || bad "resex cap domu $CAP (second resexd) failed"
    again=$(wait_xl_cap "$CAP" 10)
    [ "$again" = "$CAP" ] || bad "second resexd: xl shows cap '$again', want $CAP"
fi
t0=$(now)
kill -TERM "$RESEXD_PID"; wait "$RESEXD_PID"; rc=$?; RESEXD_PID=
term_s=$(elapsed "$t0")
restore_term=$(xl_cap)
exitline=$(clean "$LOG" | grep 'caps restored' | tail -1 | sed 's/^.*resexd: //')
echo "XEN-SIGTERM resexd exited $rc after $term_s s; xl $cmd shows cap $restore_term; log: $exitline"
[ "$restore_term" = 0 ] || bad "after SIGTERM xl shows cap '$restore_term', want 0"
echo "$exitline" | grep -q '1 caps restored' || bad "resexd's exit line does not say '1 caps restored': $exitline"
awk -v s="$term_s" 'BEGIN { exit !(s < 5) }' || bad "resexd took $term_s s to exit on SIGTERM"
clean "$LOG" | grep -E ' (WARN|ERROR) ' | head -5 | sed 's/^/XEN-LOG warn | /'

if [ "$MODE" = full ]; then
    # ---- 4. the domain is destroyed under resexd ------------------------------------------------
    echo "XEN-STEP 4: a new resexd caps domu; xl destroy domu mid-run"
    start_resexd /tmp/resexd-3.log
    wait_found 60 || fail "the third resexd did not list domu"
    resex cap domu "$CAP" --api $API || bad "resex cap domu $CAP (third resexd) failed"
    [ "$(wait_xl_cap "$CAP" 10)" = "$CAP" ] || bad "third resexd: xl does not show cap $CAP"
    grep -q '"domu"' $STATE/caps.json 2>/dev/null || bad "no record of domu's cap in $STATE/caps.json"
    # resexd's snapshots, streamed, each stamped with dom0's clock: listed or absent.
    resex top --api $API --batch --json --interval 100 2>/dev/null | awk '{
        getline u < "/proc/uptime"; close("/proc/uptime"); split(u, a, " ")
        print a[1], (index($0, "\"name\":\"domu\"") ? "listed" : "absent"); fflush() }' > /tmp/watch.txt &
    WATCH_PID=$!
    for _ in $(seq 100); do grep -q listed /tmp/watch.txt 2>/dev/null && break; sleep 0.2; done
    n0=$(wc -l < "$LOG")
    t0=$(now)
    xl destroy domu || bad "xl destroy domu failed"
    t1=$(now)
    for _ in $(seq 100); do
        awk -v t="$t0" '$1 > t && $2 == "absent"' /tmp/watch.txt | grep -q . && break
        sleep 0.2
    done
    sleep 12  # what it logs after (the registrar's xenstore read times out after 10 s)
    kill "$WATCH_PID" 2>/dev/null; wait "$WATCH_PID" 2>/dev/null
    # The first absent snapshot after the destroy began, and any listing after it.
    gone_at=$(awk -v t="$t0" '$1 > t && $2 == "absent" { print $1; exit }' /tmp/watch.txt)
    relisted=$(awk -v g="${gone_at:-0}" '$1 > g && $2 == "listed"' /tmp/watch.txt | wc -l)
    gone_s=; [ -n "$gone_at" ] && gone_s=$(awk -v a="$t1" -v g="$gone_at" 'BEGIN { printf "%.1f", g - a }')
    alive=no; kill -0 "$RESEXD_PID" 2>/dev/null && alive=yes
    after=$(clean "$LOG" | tail -n +$((n0 + 1)))
    nlines=$(echo "$after" | grep -c domu)
    nwarn=$(echo "$after" | grep -cE ' (WARN|ERROR) ')
    echo "XEN-GONE-LINE $(echo "$after" | grep -m1 'domu: gone' | sed 's/^.*resex_daemon::sampler: //')"
    echo "$after" | grep -E 'domu| (WARN|ERROR) ' | head -10 | sed 's/^/XEN-LOG after destroy | /'
    stale=$(grep -c '"domu"' $STATE/caps.json 2>/dev/null)
    echo "XEN-DESTROYED xl destroy took $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s; resexd's snapshots dropped domu ${gone_s:-never} s after it returned ($(awk -v a="$t0" -v g="${gone_at:-0}" 'BEGIN { printf "%.1f", g - a }') s after it began) (listed again after: $relisted); resexd alive: $alive; in the 12 s after: $nlines log lines about domu, $nwarn WARN/ERROR lines; caps.json records of domu: ${stale:-0} ($(tr -d '\n' < $STATE/caps.json 2>/dev/null | cut -c1-120))"
    dropped=yes
    [ -n "$gone_s" ] && awk -v s="$gone_s" 'BEGIN { exit !(s <= 5) }' || { dropped=no; bad "domu still in resex status ${gone_s:-20+} s after xl destroy returned"; }
    [ "$relisted" = 0 ] || { dropped=no; bad "domu listed again after it was dropped"; }
    [ "$alive" = yes ] || { dropped=no; bad "resexd died after xl destroy"; }
    echo "$after" | grep -q 'domu: gone' || { dropped=no; bad "no 'domu: gone' line in resexd's log"; }
    [ "$nlines" -le 4 ] || { dropped=no; bad "$nlines log lines about domu after the destroy (want at most 4)"; }
    [ "$nwarn" -le 3 ] || { dropped=no; bad "$nwarn WARN/ERROR lines after the destroy"; }
    [ "${stale:-0}" = 0 ] || { dropped=no; bad "caps.json still records domu's cap after the destroy"; }
    if [ "$alive" = yes ]; then
        kill -TERM "$RESEXD_PID"; wait "$RESEXD_PID"; rc=$?; RESEXD_PID=
        exitline=$(clean "$LOG" | grep 'caps restored' | tail -1 | sed 's/^.*resexd: //')
        echo "XEN-SIGTERM after destroy: resexd exited $rc; log: $exitline"
        [ "$rc" = 0 ] || bad "resexd exited $rc after the destroy"
        clean "$LOG" | grep -q 'could not restore' && bad "resexd could not restore at exit: $(clean "$LOG" | grep -m1 'could not restore')"
    fi
fi

# ---- 5. the agent in domv, its software HCA, resexd's counts ----------------------------------
HCA_LOG=/tmp/xen-hca.log
HCA_STATS=/tmp/hca.json
PEER_RAM=/dev/shm/resex-peer.ram
PEER_SOCK=/run/resex-peer.sock
BENCH_SOCK=/run/resex-bench.sock
VCLOG=/var/log/xen/console/guest-domv.log
# A0 SECONDS: whether less than SECONDS of dom0's clock passed since A0.
before() { awk -v a="$1" -v b="$(now)" -v s="$2" 'BEGIN { exit !(b - a < s) }'; }
hca_alive() { [ -n "$HCA_PID" ] && kill -0 "$HCA_PID" 2>/dev/null; }
alive() { kill -0 "$1" 2>/dev/null && echo yes || echo no; }
# A failed check of step 5, with the tails of the HCA's log and domv's console.
bad5() {
    bad "$*"
    [ -f $HCA_LOG ] && clean $HCA_LOG | tail -12 | sed 's/^/XEN-LOG hca | /'
    [ -f $VCLOG ] && clean $VCLOG | tail -12 | sed 's/^/XEN-LOG domv | /'
    # The links' keys (data/resex/NAME/{h2g,g2h}{,-ack}), cut short.
    d=$(xl domid domv 2>/dev/null) && xenstore-ls "/local/domain/$d/data" 2>&1 | cut -c1-160 | sed 's/^/XEN-LOG xenstore | /'
}
# FIELD: a top-level figure of the HCA's stats JSON (its per-QP objects and its destroyed QPs'
# sums, which have the same names, taken out first; the top level counts both).
hca_stat() { sed 's/"qps":\[[^]]*\]//; s/"retired":{[^}]*}//' $HCA_STATS 2>/dev/null | sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }
counts=- reports=- step5_s=-
# Returns early (after a XEN-FAIL) when a later part cannot run; the caller stops what it started.
step5() {
    T5=$(now)
    [ -f /domu/domv.cfg ] || { bad "no /domu/domv.cfg: the image was built without DOMV_RUN (tools/xen/e2e.sh gives it)"; return 1; }
    mkdir -p /dev/shm
    grep -q ' /dev/shm ' /proc/mounts || mount -t tmpfs shm /dev/shm
    { cat /domu/domv.cfg; echo 'cpus = "1"'; } > /tmp/domv.cfg
    xl create /tmp/domv.cfg > /tmp/xl-create-domv.log 2>&1 \
        || { sed 's/^/XEN-LOG xl create | /' /tmp/xl-create-domv.log; bad "xl create domv"; return 1; }
    echo "XEN-RUNNING xl list: $(xl list domv | awk '$1 == "domv"') (domid $(xl domid domv))"
    resex xen hca domv --peer-ram $PEER_RAM --peer-hca $PEER_SOCK --relay bench=$BENCH_SOCK \
        --stats $HCA_STATS > $HCA_LOG 2>&1 &
    HCA_PID=$!
    t=$(now)
    while before "$t" 120 && hca_alive && ! grep -q '^resex xen hca:' $HCA_LOG; do sleep 0.2; done
    if ! grep -q '^resex xen hca:' $HCA_LOG; then
        bad5 "resex xen hca not ready after $(elapsed "$t") s (alive: $(alive "$HCA_PID"))"; return 1
    fi
    echo "XEN-HCA ready after $(elapsed "$t") s: $(grep -m1 '^resex xen hca:' $HCA_LOG)"
    t=$(now)
    while before "$t" 180 && hca_alive && ! grep -qE 'vm mode:|xen-domv: command exited' $VCLOG 2>/dev/null; do
        sleep 0.5
    done
    if ! grep -q 'vm mode:' $VCLOG 2>/dev/null; then
        bad5 "the agent in domv did not reach the HCA (no 'vm mode:' on its console after $(elapsed "$t") s; hca alive: $(alive "$HCA_PID"))"
        return 1
    fi
    echo "XEN-AGENT after $(elapsed "$t") s: $(clean $VCLOG | grep -m1 'vm mode:' | sed 's/^.*resex_agent::cli: //')"
    start_resexd /tmp/resexd-5.log
    t=$(now)
    st=
    while before "$t" 180 && kill -0 "$RESEXD_PID" 2>/dev/null; do
        st=$(field state domv)
        [ "$st" = registered ] && break
        sleep 0.5
    done
    if [ "$st" != registered ]; then
        bad5 "domv not registered with resexd after $(elapsed "$t") s (state '${st:-not listed}'; resexd alive: $(alive "$RESEXD_PID"), hca alive: $(alive "$HCA_PID"))"
        logtail 12
        return 1
    fi
    echo "XEN-REGISTERED after $(elapsed "$t") s: $(resex status --api $API | grep -E '^ *(VM|domv) ' | tr -s ' ' | head -2 | tr '\n' '|')"
    t=$(now)
    timeout 300 resex benchex client --ram $PEER_RAM --hca $PEER_SOCK --connect $BENCH_SOCK \
        --count "$ORDERS" --rate 200 --duration 0 > /tmp/benchex.log 2>&1
    rc=$?
    echo "XEN-BENCHEX $ORDERS orders: exit $rc after $(elapsed "$t") s"
    clean /tmp/benchex.log | tail -6 | sed 's/^/XEN-LOG benchex | /'
    [ "$rc" = 0 ] || bad5 "resex benchex client exited $rc"
    sleep 2
    j=$(vm_json domv)
    r_mtus=$(jfield "$j" mtus_total); r_bytes=$(jfield "$j" tx_bytes_total); r_wqes=$(jfield "$j" wqes_total)
    reports=$(jfield "$j" reports)
    faults=$(echo "$(jfield "$j" errors) $(jfield "$j" overruns) $(jfield "$j" anomalies)" | awk 'NF == 3 { print $1 + $2 + $3 }')
    stop_hca
    h_mtus=$(hca_stat mtus); h_bytes=$(hca_stat tx_bytes); h_wqes=$(hca_stat wqes)
    echo "XEN-HCA-STATS exit $HCA_RC: $(cut -c1-300 $HCA_STATS 2>/dev/null)"
    [ "$HCA_RC" = 0 ] || bad5 "resex xen hca exited $HCA_RC on SIGTERM"
    [ -n "$h_mtus" ] || bad5 "no figures in the HCA's stats $HCA_STATS"
    want=$((ORDERS * (65536 + 8) + ORDERS))
    counts=differ
    [ -n "$r_mtus" ] && [ "$r_mtus $r_bytes $r_wqes" = "$h_mtus $h_bytes $h_wqes" ] && counts=equal
    step5_s=$(elapsed "$T5")s
    echo "XEN-COUNTS resexd mtus=$r_mtus bytes=$r_bytes wqes=$r_wqes reports=$reports faults=$faults hca mtus=$h_mtus bytes=$h_bytes wqes=$h_wqes (want bytes=$want for $ORDERS orders; step 5 took $step5_s)"
    [ "$counts" = equal ] || bad "resexd's counts for domv differ from what the HCA executed"
    [ "$r_bytes" = "$want" ] || bad "resexd counted $r_bytes bytes, want $want for $ORDERS orders"
    [ "${reports:-0}" -gt 0 ] 2>/dev/null || bad "resexd accepted no latency reports from domv (reports '$reports')"
    [ "$faults" = 0 ] || bad "errors + overruns + anomalies = '$faults' for domv, want 0"
    clean "$LOG" | grep -E ' (WARN|ERROR) ' | head -5 | sed 's/^/XEN-LOG warn | /'
}
if [ "$MODE" = full ]; then
    echo "XEN-STEP 5: the agent in domv, resex xen hca, BenchEx clients: resexd's counts against the HCA's"
    stop_resexd  # (the third resexd is gone unless step 4 failed)
    step5
    stop_hca
    stop_resexd
    xl list domv >/dev/null 2>&1 && xl destroy domv
    [ "$step5_s" = - ] && step5_s=$(elapsed "$T5")s
    [ "$counts" = - ] && counts=none
    echo "XEN-STEP5-TIME step 5 took $step5_s (counts $counts)"
fi
stop_resexd
xl list domu >/dev/null 2>&1 && xl destroy domu
# The whole logs, for tools/xen/e2e.sh to keep (boot.sh echoes only XEN-* lines).
for f in /tmp/resexd-*.log; do
    [ -f "$f" ] && clean "$f" | sed "s|^|$(basename "$f" .log)\| |"
done
[ -f $HCA_LOG ] && clean $HCA_LOG | sed 's/^/xen-hca| /'
[ -f $VCLOG ] && clean $VCLOG | sed 's/^/guest-domv| /'

echo "XEN-E2E sched=$sched cap=$CAP xl=$shows measured=${measured}% xentop=${xentop_pct}% resexd_cpu=${cpu0}->${cpu1} xl_after_kill9=$kill9 restore_after_kill9=$after_restore restore_on_term=$restore_term term_exit=${term_s}s destroyed_dropped=$dropped gone_after=${gone_s}s resexd_dom0_cpu=${dom0_pct}% failed_checks=$BAD counts=$counts reports=$reports step5=$step5_s"
[ "$BAD" = 0 ] && echo "XEN-PAYLOAD-OK"
exit 0
