#!/usr/bin/env bash
# The VF rate lever on a real kernel driver: the Debian kernel under QEMU TCG with netdevsim, a device in switchdev mode (devlink rate) and one in legacy
# mode (IFLA_VF_RATE), each with VFs; a static resexd (--backend local, one published domain
# record per VF-owning "VM") pins limits with `resex rate`; the real `devlink` and `ip` check
# that the kernel holds what resexd set, that the limits outlive `kill -9`, that a restart puts
# the originals back, and that unsupported values give one clear line each
# (tools/kvm/netdevsim-guest.sh runs in the guest and reports on the serial console).
#
# Debian's kernels are built without netdevsim (CONFIG_NETDEVSIM is not set), so the module is
# built here from Debian's own source of that kernel (linux-source-X.Y) against its headers
# (linux-headers-KVER): the same driver, out of tree (the kernel is then tainted, nothing more).
#
# Usage (root): tools/kvm/netdevsim.sh   (RESEX_E2E_NO_INSTALL=1 skips apt-get;
#                                         RESEX_NSIM_TRACE=1 prints resexd's netlink bytes)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
START=$(date +%s)
WORK=$(mktemp -d /tmp/resex-nsim.XXXXXX)
# The last console is kept (target/netdevsim/console.log) for a look after a failure.
trap 'cp "$WORK/console.log" "$ROOT/target/netdevsim/console.log" 2>/dev/null; rm -rf "$WORK"' EXIT
step() { echo "== netdevsim: $*"; }
fail() { echo "netdevsim FAILED: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "run as root (apt-get, module build)"
if [ "${RESEX_E2E_NO_INSTALL:-0}" != 1 ]; then
    step "installing qemu, a kernel, busybox, iproute2"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends qemu-system-x86 linux-image-amd64 \
        busybox-static cpio iproute2 xz-utils make gcc >/dev/null
fi
KERNEL=$(ls /boot/vmlinuz-* | sort -V | tail -1)
export KVER=${KERNEL#/boot/vmlinuz-}
MM=$(echo "$KVER" | cut -d. -f1,2)
if [ "${RESEX_E2E_NO_INSTALL:-0}" != 1 ]; then
    step "installing linux-headers-$KVER and linux-source-$MM (netdevsim's source)"
    apt-get install -y -qq --no-install-recommends "linux-headers-$KVER" "linux-source-$MM" >/dev/null
fi

# netdevsim.ko for this kernel, built once per kernel version (kept under target/).
NSIM_DIR=$ROOT/target/netdevsim/$KVER
if [ ! -f "$NSIM_DIR/netdevsim.ko" ]; then
    step "building netdevsim.ko for $KVER from /usr/src/linux-source-$MM.tar.xz"
    [ -f "/usr/src/linux-source-$MM.tar.xz" ] || fail "no /usr/src/linux-source-$MM.tar.xz"
    tar -xJf "/usr/src/linux-source-$MM.tar.xz" -C "$WORK" --wildcards \
        "linux-source-$MM/drivers/net/netdevsim/*"
    SRC=$WORK/linux-source-$MM/drivers/net/netdevsim
    make -s -C "/lib/modules/$KVER/build" M="$SRC" CONFIG_NETDEVSIM=m modules -j2 >"$WORK/kbuild.log" 2>&1 \
        || { tail -20 "$WORK/kbuild.log"; fail "building netdevsim"; }
    mkdir -p "$NSIM_DIR"; cp "$SRC/netdevsim.ko" "$NSIM_DIR/"
fi
# Its dependencies from the kernel's own modules, each after what it needs.
mods=""
add_mod() { # NAME
    local f dep
    f=$(modinfo -k "$KVER" -n "$1" 2>/dev/null || true)
    [ -n "$f" ] || fail "module $1 not found for $KVER"
    for dep in $(modinfo -k "$KVER" -F depends "$f" | tr ',' ' '); do add_mod "$dep"; done
    case " $mods " in *" $f "*) ;; *) mods="$mods $f" ;; esac
}
for dep in $(modinfo -F depends "$NSIM_DIR/netdevsim.ko" | tr ',' ' '); do add_mod "$dep"; done
mods="$mods $NSIM_DIR/netdevsim.ko"

step "building static resexd and resex for the guest"
RUSTFLAGS='-C target-feature=+crt-static' cargo build --release -q -p resex-cli -p resex-daemon \
    --target x86_64-unknown-linux-gnu
BIN=$ROOT/target/x86_64-unknown-linux-gnu/release
for b in resexd resex; do
    if ldd "$BIN/$b" 2>&1 | grep -q '=>'; then fail "$b is not static: $(ldd "$BIN/$b" | head -3)"; fi
done

step "guest image: busybox, resexd, resex, devlink and ip (iproute2 $(ip -V | grep -o 'iproute2-[^ ,]*')), netdevsim"
INITRD_MODULES="$mods" tools/kvm/initramfs.sh "$WORK/initrd.gz" "$BIN/resexd" "$BIN/resex" \
    "$(command -v devlink)" "$(command -v ip)" tools/kvm/netdevsim-guest.sh

step "booting $KVER under QEMU TCG (console: target/netdevsim/console.log)"
TRACE=""; [ "${RESEX_NSIM_TRACE:-0}" = 1 ] && TRACE=" resex.trace=1"
# TCG, as the KVM end-to-end test (a nested /dev/kvm may be there and not work).
BOOT=$(date +%s)
timeout 600 qemu-system-x86_64 -accel "${RESEX_NSIM_ACCEL:-tcg}" -m 512 -smp 1 -no-reboot -display none -monitor none \
    -serial "file:$WORK/console.log" -kernel "$KERNEL" -initrd "$WORK/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1 resex.mode=script resex.script=netdevsim-guest.sh$TRACE" \
    || fail "QEMU: exit $? (timeout 600 s?): $(tail -5 "$WORK/console.log")"
echo "   (the guest ran $(( $(date +%s) - BOOT )) s)"
grep "^nsim: " "$WORK/console.log" | sed 's/^nsim: /   /' || true
grep -q "^nsim: PASSED" "$WORK/console.log" || {
    grep -q "^nsim: " "$WORK/console.log" || tail -30 "$WORK/console.log"
    fail "$(grep -o 'nsim: FAILED.*' "$WORK/console.log" || echo 'the guest did not finish')"
}
step "passed in $(( $(date +%s) - START )) s"
