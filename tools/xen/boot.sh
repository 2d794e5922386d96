#!/usr/bin/env bash
# Boots a nested Xen host under QEMU (TCG: no KVM needed; guests are PV) and runs PAYLOAD in its
# dom0: Xen 4.17 (Debian's xen-hypervisor-4.17-amd64), the host's Debian kernel as a PV dom0 with
# the busybox + xen-utils initramfs of tools/xen/initramfs.sh, and a spinning PV domU ready to
# `xl create /domu/domu.cfg`. PAYLOAD runs as `sh /payload.sh` once xenstored, xen-init-dom0 and
# xenconsoled are up; the dom0 powers off after it.
# The console (Xen's com1, dom0's hvc0 through it) goes to WORKDIR/console.log; lines starting
# with `xen-dom0:` or `XEN-` are echoed while it runs. Fails (one line, then the console's tail)
# when no line matches XEN_MARKER (a grep -E pattern, default `^XEN-PAYLOAD-OK`).
# Environment:
#   XEN_ARGS       more hypervisor arguments (e.g. `sched=credit`)
#   DOM0_ARGS      the dom0 kernel's extra arguments (default `quiet rodata=off`: Debian's
#                  kernel checks W+X mappings after marking rodata, a page-table walk that takes
#                  ~30 s of TCG in a PV guest; rodata=off skips it)
#   XEN_TIMEOUT    seconds before QEMU is stopped (default 600)
#   XEN_BOOT_WATCHDOG  seconds for the dom0's init to say "kernel up" before the boot counts as
#                  hung (default 240; it takes ~15 s)
#   XEN_BOOT_TRIES boots to try when the dom0 hangs before its init (default 2)
#   XEN_MARKER     the success line, a grep -E pattern (default ^XEN-PAYLOAD-OK)
#   EXTRA          more host files for the dom0 (see initramfs.sh)
#   RESEX_E2E_NO_INSTALL=1  skip apt-get
# Usage (root): tools/xen/boot.sh PAYLOAD [WORKDIR]   (WORKDIR default: a new /tmp/resex-xen.*)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
step() { echo "== xen: $*"; }
fail() { echo "xen FAILED: $*" >&2; exit 1; }
[ $# -ge 1 ] && [ $# -le 2 ] || fail "usage: tools/xen/boot.sh PAYLOAD [WORKDIR]"
PAYLOAD=$1
[ -f "$PAYLOAD" ] || fail "payload $PAYLOAD not found"
WORK=${2:-$(mktemp -d /tmp/resex-xen.XXXXXX)}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
MARKER=${XEN_MARKER:-^XEN-PAYLOAD-OK}
QEMU_PID=
TAIL_PID=
cleanup() {
    set +e
    [ -n "$QEMU_PID" ] && kill "$QEMU_PID" 2>/dev/null && wait "$QEMU_PID" 2>/dev/null
    [ -n "$TAIL_PID" ] && kill "$TAIL_PID" 2>/dev/null && wait "$TAIL_PID" 2>/dev/null
}
trap cleanup EXIT
T0=$(date +%s.%N)
since() { python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$(date +%s.%N)"; }

if [ "${RESEX_E2E_NO_INSTALL:-0}" != 1 ]; then
    step "installing xen 4.17, qemu, a kernel and busybox"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends xen-hypervisor-4.17-amd64 xen-utils-4.17 \
        xenstore-utils libxen-dev qemu-system-x86 linux-image-amd64 busybox-static cpio file \
        >/dev/null
fi
XENGZ=/boot/xen-4.17-amd64.gz
[ -f $XENGZ ] || fail "$XENGZ missing (apt-get install xen-hypervisor-4.17-amd64)"
KERNEL=$(ls /boot/vmlinuz-* | sort -V | tail -1)
export KVER=${KERNEL#/boot/vmlinuz-}

step "hypervisor and initramfs into $WORK"
# QEMU's -kernel takes Xen as a multiboot ELF, not gzip'd.
zcat $XENGZ > "$WORK/xen"
# The kernel (dom0's and the domU's) as an uncompressed ELF vmlinux: Xen decompresses a
# bzImage's xz payload in ~7 s of TCG, and xl create in dom0 takes 17 s instead of 3 s; the host
# does it in 1 s. (The xz stream starts at its magic, FD 37 7A 58 5A 00.)
DOM0_KERNEL=$KERNEL
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$KERNEL" | head -1 | cut -d: -f1 || true)
if [ -n "$off" ] && { tail -c +$((off + 1)) "$KERNEL" | xz -dc 2>/dev/null > "$WORK/vmlinux" || true; } \
        && file "$WORK/vmlinux" | grep -q 'ELF 64-bit'; then
    DOM0_KERNEL=$WORK/vmlinux
else
    echo "   (could not extract vmlinux from $KERNEL: Xen decompresses the bzImage)"
fi
DOMU_KERNEL=$DOM0_KERNEL "$HERE/initramfs.sh" "$WORK" "$PAYLOAD"

# One boot: QEMU runs until the dom0 says it is done, the timeout, or the watchdog: a dom0 whose
# init has not said "kernel up" BOOT_WATCHDOG seconds after QEMU started (it takes ~15 s) is
# hung in its kernel (seen once in ~30 runs under TCG: silent after "Freed ... init memory"),
# and is booted again, up to XEN_BOOT_TRIES times.
boot_once() {
    : > "$WORK/console.log"
    BOOT0=$(date +%s.%N)
    timeout "${XEN_TIMEOUT:-600}" qemu-system-x86_64 -machine q35 -cpu Haswell-noTSX -m 3072 -smp 2 \
        -display none -monitor none -serial "file:$WORK/console.log" -no-reboot \
        -kernel "$WORK/xen" -append "$XEN_CMDLINE" \
        -initrd "$DOM0_KERNEL console=hvc0 rdinit=/init ${DOM0_ARGS-quiet rodata=off},$WORK/dom0.cpio.gz" </dev/null \
        > "$WORK/qemu.log" 2>&1 &
    QEMU_PID=$!
    # Echo the dom0's own lines and the payload's results as they come, with the wall time since
    # QEMU started, and mark when Xen and the dom0 kernel start.
    tail -n +1 -f --pid="$QEMU_PID" "$WORK/console.log" 2>/dev/null | {
        B=${BOOT0/./}; B=${B:0:16}
        while IFS= read -r line; do
            line=${line%$'\r'}
            case "$line" in
                "(XEN) Xen version"*) line="xen: hypervisor started" ;;
                "(XEN) *** Serial input to DOM0"*) line="xen: dom0 kernel starting" ;;
                xen-dom0:* | XEN-*) ;;
                *) continue ;;
            esac
            N=${EPOCHREALTIME/./}
            printf '   [+%5.1fs] %s\n' "$(( (N - B) / 100000 ))e-1" "$line"
        done
    } &
    TAIL_PID=$!
    # dom0's poweroff -f makes Xen enter ACPI S5 and QEMU exit; should Xen only halt, stop QEMU
    # 10 s after the dom0 said it is done.
    RC=0; HUNG=0; up=0; started=$SECONDS
    while kill -0 "$QEMU_PID" 2>/dev/null; do
        if grep -qE '^xen-dom0: .*(payload exited|FAILED)' "$WORK/console.log" 2>/dev/null; then
            for _ in $(seq 50); do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 0.2; done
            kill "$QEMU_PID" 2>/dev/null || true
            break
        fi
        if [ "$up" = 0 ]; then
            if grep -qE '^xen-dom0: .*kernel up' "$WORK/console.log" 2>/dev/null; then
                up=1
            elif [ $((SECONDS - started)) -ge "$BOOT_WATCHDOG" ]; then
                HUNG=1
                kill "$QEMU_PID" 2>/dev/null || true
                break
            fi
        fi
        sleep 0.5
    done
    wait "$QEMU_PID" || RC=$?
    QEMU_PID=
    wait "$TAIL_PID" 2>/dev/null || true; TAIL_PID=  # tail stops within a second of QEMU
}

# Haswell-noTSX: with -cpu max or qemu64 the PV dom0 dies early (d0v0 Unhandled: vec 14).
XEN_CMDLINE="console=com1 com1=115200,8n1 dom0_mem=1024M,max:1024M dom0_max_vcpus=2 ${XEN_ARGS:-}"
BOOT_WATCHDOG=${XEN_BOOT_WATCHDOG:-240}
TRIES=${XEN_BOOT_TRIES:-2}
for try in $(seq "$TRIES"); do
    step "booting Xen ($XEN_CMDLINE) under QEMU TCG, dom0 $KVER; console: $WORK/console.log"
    boot_once
    [ "$HUNG" = 1 ] || break
    cp "$WORK/console.log" "$WORK/console-hung-$try.log"
    echo "xen: the dom0 kernel did not reach its init within ${BOOT_WATCHDOG}s (boot $try of $TRIES; console kept as $WORK/console-hung-$try.log)" >&2
    if [ "$try" -lt "$TRIES" ]; then step "booting again"; fi
done
BOOT_S=$(since "$BOOT0")
tr -d '\r' < "$WORK/console.log" > "$WORK/console.txt" && mv "$WORK/console.txt" "$WORK/console.log"
echo "$BOOT_S" > "$WORK/boot-seconds"
step "QEMU ran ${BOOT_S}s (exit $RC; $(since "$T0")s with the build)"

if ! grep -qE "$MARKER" "$WORK/console.log"; then
    why="no line matching '$MARKER' on the console"
    [ "$RC" = 124 ] && why="$why (QEMU timed out after ${XEN_TIMEOUT:-600}s)"
    [ "$HUNG" = 1 ] && why="$why (the dom0 kernel hung before its init on all $TRIES boots)"
    last=$(grep -E '^xen-dom0: .*(FAILED|payload exited)' "$WORK/console.log" | tail -1 || true)
    [ -n "$last" ] && why="$why; ${last#xen-dom0: }"
    grep -q '^xen-dom0: .*toolstack up' "$WORK/console.log" || why="$why; the dom0 never got its toolstack up"
    echo "xen FAILED: $why; last console lines ($WORK/console.log):" >&2
    tail -25 "$WORK/console.log" | sed 's/^/   | /' >&2
    grep -v "TCG doesn't support requested feature" "$WORK/qemu.log" | sed 's/^/   qemu: /' >&2
    exit 1
fi
step "payload succeeded"
