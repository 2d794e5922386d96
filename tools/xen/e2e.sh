#!/usr/bin/env bash
# End to end on real Xen: resexd's xen backend in the dom0 of a nested Xen 4.17 host
# (tools/xen/boot.sh: QEMU TCG, no KVM needed; the guest is PV), booted twice: with the default
# scheduler (credit2) and with XEN_ARGS=sched=credit. In dom0 (tools/xen/e2e-payload.sh), with
# a spinning PV domU `domu`:
#  1. `resexd --backend xen --no-policy` finds domu (`resex status`) and reads its CPU (~100%);
#  2. `resex cap domu 25`: `xl sched-credit2 -d domu` (`xl sched-credit`) shows Cap 25 and the
#     domU's CPU from `xl list` Time(s) over 20 s is within 10% of 25 (xentop and resexd's own
#     cpu_pct printed too);
#  3. after `kill -9` the cap stays and `resexd --restore` puts 0 back; a new resexd caps again
#     and on SIGTERM exits at once putting 0 back ("1 caps restored");
#  4. `xl destroy domu` under a running resexd: it lives on, drops domu from its status within
#     a few seconds with one log line, forgets its cap record, and logs no error spam;
#  5. (the Xen twin of tools/kvm/e2e.sh part B) a second PV domU `domv` runs the real agent,
#     a static `resex-agent --vm --xen` with BenchEx's server, its HCA control channel, its
#     registration and BenchEx's bootstrap over xenstore; `resex xen hca domv` in dom0 is its
#     software HCA; `resex benchex client` in dom0 sends 100 orders; resexd's counts for domv
#     (read out of the domU's memory) equal exactly what the HCA executed, its latency reports
#     arrive (reports > 0) and it sees no errors, overruns or anomalies.
# Each domU runs alone on pCPU 1 and dom0 on pCPU 0: under TCG resexd costs dom0 about one
# whole vCPU, which would otherwise come out of the measured domU's share.
# Prints each boot's summary line and wall time; fails with one line when a check fails.
# WORKDIR/SCHED/ keeps each boot's console.log, resexd's logs (resexd-1.log ... resexd-5.log),
# the HCA's (xen-hca.log) and domv's console (guest-domv.log).
# Environment:
#   RESEX_XEN_BIN=DIR        prebuilt resexd and resex (built with the xen feature) and a static
#                            resex-agent instead of `cargo build --release -p resex-cli
#                            -p resex-daemon` with it and the static agent's build
#                            (RUSTFLAGS='-C target-feature=+crt-static' cargo build --release
#                            -p resex-agent --target x86_64-unknown-linux-gnu)
#   RESEX_E2E_NO_INSTALL=1   skip apt-get (see boot.sh for what it installs)
#   XEN_E2E_SCHEDS           the boots (default "credit2 credit")
#   XEN_E2E_CREDIT_MODE      full (default) or short: the credit boot runs only steps 1, 2 and
#                            the SIGTERM restore (no domv, no step 5)
#   XEN_E2E_DOM0_VCPUS       dom0's vCPUs (default 2, both pinned to pCPU 0; with 1, resexd's
#                            SCHED_FIFO loop leaves the toolstack so little that a boot takes
#                            ~10 min and xl's timings blur the measurement)
#   XEN_TIMEOUT              each boot's QEMU timeout, seconds (default here 1200)
# Usage (root): tools/xen/e2e.sh [WORKDIR]   (WORKDIR default: a new /tmp/resex-xen-e2e.*)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CAP=25
WINDOW=20
ORDERS=100
step() { echo "== xen e2e: $*"; }
fail() { echo "xen e2e FAILED: $*" >&2; exit 1; }
[ $# -le 1 ] || fail "usage: tools/xen/e2e.sh [WORKDIR]"
WORK=${1:-$(mktemp -d /tmp/resex-xen-e2e.XXXXXX)}
mkdir -p "$WORK/bin"
WORK=$(cd "$WORK" && pwd)
# Whether a boot runs the full checks (step 5 and its domv need the static agent).
FULL=0
for sched in ${XEN_E2E_SCHEDS:-credit2 credit}; do
    [ "$sched" = credit ] && [ "${XEN_E2E_CREDIT_MODE:-full}" = short ] || FULL=1
done

if [ -n "${RESEX_XEN_BIN:-}" ]; then
    BIN=$RESEX_XEN_BIN
    step "prebuilt binaries from $BIN"
else
    if [ "${RESEX_E2E_NO_INSTALL:-0}" != 1 ]; then
        step "installing the xen feature's build dependencies (libxen-dev, libclang-dev)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends libxen-dev libclang-dev >/dev/null
    fi
    step "building resex and resexd with the xen feature, and a static resex-agent for domv"
    (cd "$ROOT" && cargo build --release -q -p resex-cli -p resex-daemon \
        --features resex-cli/xen,resex-daemon/xen)
    if [ "$FULL" = 1 ]; then
        (cd "$ROOT" && RUSTFLAGS='-C target-feature=+crt-static' cargo build --release -q \
            -p resex-agent --target x86_64-unknown-linux-gnu)
        AGENT=$ROOT/target/x86_64-unknown-linux-gnu/release/resex-agent
    fi
    BIN=$ROOT/target/release
fi
for b in resexd resex; do
    [ -x "$BIN/$b" ] || fail "$BIN/$b missing"
    # Without debug info: the dom0's initramfs (and its unpacking under TCG) is much smaller.
    strip -o "$WORK/bin/$b" "$BIN/$b" 2>/dev/null || cp "$BIN/$b" "$WORK/bin/$b"
done
# The agent for domv: RESEX_XEN_BIN's, or the one built above; static (domv has no libraries).
if [ "$FULL" = 1 ]; then
    AGENT=${AGENT:-$BIN/resex-agent}
    [ -x "$AGENT" ] || fail "$AGENT missing (a static resex-agent: RUSTFLAGS='-C target-feature=+crt-static' cargo build --release -p resex-agent --target x86_64-unknown-linux-gnu)"
    { file -L "$AGENT" | grep -qE 'statically linked|static-pie linked'; } || ldd "$AGENT" 2>&1 | grep -q 'not a dynamic' \
        || fail "$AGENT is not statically linked (build it with RUSTFLAGS='-C target-feature=+crt-static' --target x86_64-unknown-linux-gnu)"
    strip -o "$WORK/bin/resex-agent" "$AGENT" 2>/dev/null || cp "$AGENT" "$WORK/bin/resex-agent"
fi
# What domv runs (initramfs.sh's DOMV_RUN): the agent, as tools/kvm/initramfs.sh runs it in a
# KVM guest but over xenstore.
DOMV_CMD="RUST_LOG=info NO_COLOR=1 /bin/resex-agent --vm --xen --name domv --listen xs:bench --polling adaptive"
# resexd and resex built with the xen feature name the library they dlopen (resex needs it for
# `resex xen hca`, step 5).
grep -qa 'libxenctrl.so' "$BIN/resexd" || fail "$BIN/resexd was built without the xen feature"
if [ "$FULL" = 1 ]; then
    grep -qa 'libxenforeignmemory.so' "$BIN/resex" || fail "$BIN/resex was built without the xen feature (step 5 runs resex xen hca)"
fi

DOM0_VCPUS=${XEN_E2E_DOM0_VCPUS:-2}
SUMMARY=()
FAILED=()
for sched in ${XEN_E2E_SCHEDS:-credit2 credit}; do
    args="dom0_max_vcpus=$DOM0_VCPUS"; mode=full  # (after boot.sh's dom0_max_vcpus=2: it wins)
    if [ "$sched" = credit ]; then args="$args sched=credit"; mode=${XEN_E2E_CREDIT_MODE:-full}; fi
    { echo "CAP=$CAP WINDOW=$WINDOW MODE=$mode ORDERS=$ORDERS"; cat "$HERE/e2e-payload.sh"; } > "$WORK/payload-$sched.sh"
    # domv (step 5) only where the full checks run.
    domv_extra='' domv_run=''
    if [ "$mode" = full ]; then domv_extra=$WORK/bin/resex-agent; domv_run=$DOMV_CMD; fi
    step "boot with scheduler $sched${args:+ (XEN_ARGS=$args)}, checks: $mode"
    t0=$(date +%s)
    rc=0
    XEN_ARGS="$args" XEN_TIMEOUT=${XEN_TIMEOUT:-1200} EXTRA="$WORK/bin/resexd $WORK/bin/resex" \
        DOMV_EXTRA="$domv_extra" DOMV_RUN="$domv_run" \
        "$HERE/boot.sh" "$WORK/payload-$sched.sh" "$WORK/$sched" || rc=$?
    wall=$(( $(date +%s) - t0 ))
    export RESEX_E2E_NO_INSTALL=1  # installed once is enough
    log=$WORK/$sched/console.log
    # resexd's own logs, the HCA's and domv's console, which the payload prints at its end as
    # `resexd-N| LINE`, `xen-hca| LINE` and `guest-domv| LINE`.
    awk -v d="$WORK/$sched" '/^(resexd-[a-z0-9]+|xen-hca|guest-domv)\| / { i = index($0, "| "); print substr($0, i + 2) > (d "/" substr($0, 1, i - 1) ".log") }' \
        "$log" 2>/dev/null || true
    line=$(grep -m1 '^XEN-E2E ' "$log" 2>/dev/null || true)
    qemu=$(cat "$WORK/$sched/boot-seconds" 2>/dev/null || echo "?")
    SUMMARY+=("$(printf '%-8s wall %4ss (QEMU %ss)  %s' "$sched" "$wall" "$qemu" "${line:-no XEN-E2E line}")")
    if [ "$rc" != 0 ]; then
        why=$(grep '^XEN-FAIL ' "$log" 2>/dev/null | sed 's/^XEN-FAIL //' | paste -sd ';' || true)
        FAILED+=("$sched: ${why:-boot.sh failed (exit $rc), console $log}")
        continue
    fi
    got() { echo "$line" | tr ' ' '\n' | sed -n "s/^$1=//p" | tr -d '%'; }
    [ "$(got sched)" = "$sched" ] || FAILED+=("$sched: the boot ran scheduler '$(got sched)'")
    [ "$(got xl)" = "$CAP" ] || FAILED+=("$sched: xl shows cap '$(got xl)', want $CAP")
    awk -v m="$(got measured)" -v c=$CAP 'BEGIN { d = m - c; if (d < 0) d = -d; exit !(m != "" && d <= 0.1 * c) }' \
        || FAILED+=("$sched: measured $(got measured)%, not within 10% of $CAP")
    if [ "$mode" = full ]; then
        [ "$(got counts)" = equal ] || FAILED+=("$sched: resexd's counts for domv against the HCA's: '$(got counts)', want equal")
        [[ "$(got reports)" =~ ^[0-9]+$ ]] && [ "$(got reports)" -gt 0 ] \
            || FAILED+=("$sched: resexd accepted '$(got reports)' latency reports from domv, want > 0")
    fi
done
step "summary (cap $CAP%; measured = the domU's xl list Time(s) over $WINDOW s; resexd_cpu = its cpu_pct for domu, median uncapped -> mean capped)"
printf '   %s\n' "${SUMMARY[@]}"
[ ${#FAILED[@]} = 0 ] || fail "$(IFS='|'; echo "${FAILED[*]}" | sed 's/|/ | /g') (consoles under $WORK)"
step "passed"
