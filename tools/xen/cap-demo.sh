#!/usr/bin/env bash
# Xen's own CPU caps on a nested Xen host (tools/xen/boot.sh, QEMU TCG): boots it twice, once
# with the default scheduler (credit2) and once with XEN_ARGS=sched=credit. In dom0
# (tools/xen/cap-payload.sh) a spinning PV domU is created, measured uncapped, capped at 25%
# (`xl sched-credit2 -d domu -c 25` / `xl sched-credit -d domu -c 25`) and measured again from
# `xl list`'s Time(s) over 20 s (and with xentop). Checks that xl shows the cap and that the
# measured share is within 10% (relative) of it; prints a summary with each boot's wall time.
# Usage (root): tools/xen/cap-demo.sh [WORKDIR]   (RESEX_E2E_NO_INSTALL=1 skips apt-get)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CAP=25
step() { echo "== xen: $*"; }
fail() { echo "xen cap-demo FAILED: $*" >&2; exit 1; }
WORK=${1:-$(mktemp -d /tmp/resex-xen-cap.XXXXXX)}
mkdir -p "$WORK"
{ echo "CAP=$CAP"; cat "$HERE/cap-payload.sh"; } > "$WORK/payload.sh"

SUMMARY=()
for sched in credit2 credit; do
    args=""; [ "$sched" = credit ] && args="sched=credit"
    step "boot with scheduler $sched${args:+ (XEN_ARGS=$args)}"
    XEN_ARGS="$args" "$HERE/boot.sh" "$WORK/payload.sh" "$WORK/$sched" \
        || fail "the $sched boot failed (console: $WORK/$sched/console.log)"
    export RESEX_E2E_NO_INSTALL=1  # installed once is enough
    line=$(grep -m1 '^XEN-CAP ' "$WORK/$sched/console.log") || fail "$sched: no XEN-CAP line"
    got() { echo "$line" | tr ' ' '\n' | sed -n "s/^$1=//p" | tr -d '%'; }
    [ "$(got sched)" = "$sched" ] || fail "$sched boot ran scheduler '$(got sched)': $line"
    [ "$(got xl_shows)" = "$CAP" ] || fail "$sched: xl shows cap '$(got xl_shows)', want $CAP: $line"
    m=$(got measured)
    python3 -c "import sys; sys.exit(0 if abs(float('$m') - $CAP) <= 0.1 * $CAP else 1)" \
        || fail "$sched: measured ${m}%, not within 10% of the cap $CAP: $line"
    SUMMARY+=("$(printf '%-8s boot %5ss  %s' "$sched" "$(cat "$WORK/$sched/boot-seconds")" "${line#XEN-CAP }")")
done
step "summary (cap $CAP%, measured = domU's xl list Time(s) over 20 s of dom0's clock)"
printf '   %s\n' "${SUMMARY[@]}"
step "passed"
