#!/usr/bin/env bash
# Builds the initramfs archives of the nested Xen host (see tools/xen/boot.sh):
#   OUTDIR/domu.cpio.gz - a PV domU: static busybox and an /init that prints
#                         "xen-domu: up, spinning" and then spins forever (a guest that wants a
#                         whole CPU, for the cap checks).
#   OUTDIR/domv.cpio.gz - only with DOMV_RUN: a second PV domU that does not spin: its /init
#                         mounts proc, sysfs, devtmpfs and a tmpfs on /tmp, prints
#                         "xen-domv: up ..." (with what /dev/xen holds), runs DOMV_RUN in the
#                         foreground (output on its console), prints
#                         "xen-domv: command exited RC" and then idles.
#   OUTDIR/dom0.cpio.gz - the dom0 (a PV Debian kernel): static busybox, xen-utils-4.17's
#                         toolstack (xl, xenstored, xenconsoled, xen-init-dom0, xentop,
#                         libxl-save-helper, the xenstore-* tools) with the shared libraries `ldd`
#                         lists (and every libxen*.so* name, unversioned ones included, for
#                         programs that dlopen them), the xen kernel modules (privcmd, evtchn,
#                         gntdev, gntalloc, xenfs, with what modules.dep says they need), the
#                         domU under /domu (vmlinuz, initrd, domu.cfg for `xl create`; with
#                         DOMV_RUN also domv.cpio.gz and domv.cfg: PV, the same kernel,
#                         256 MiB, 1 vCPU, name "domv"), and PAYLOAD as /payload.sh.
# The dom0's /init mounts proc, sys, devtmpfs, devpts, tmpfs on /run, loads the modules, mounts
# xenfs on /proc/xen, starts xenstored, xen-init-dom0 and xenconsoled, prints
# "xen-dom0: toolstack up", runs `sh /payload.sh`, prints "xen-dom0: payload exited RC" and
# powers off. Its console (hvc0, through Xen to com1) is the test's channel. Guests' consoles are
# logged to /var/log/xen/console/guest-NAME.log in dom0.
# EXTRA: more host files for the dom0 (they go to /bin, with their shared libraries).
# KVER: the kernel whose modules go in (default: the newest in /lib/modules).
# DOMU_EXTRA, DOMU_RUN: static binaries for the domU's /bin, and a command it starts first.
# DOMV_EXTRA, DOMV_RUN: static binaries for domv's /bin, and the shell command line it runs (as
# /run.sh); without DOMV_RUN there is no domv.
# DOMU_KERNEL: the domU's kernel (default /boot/vmlinuz-$KVER; boot.sh gives an uncompressed
# vmlinux, which xl create loads in 3 s of TCG instead of 17 s).
# Usage: [EXTRA="/path/to/resexd /path/to/resex"] [KVER=...] tools/xen/initramfs.sh OUTDIR PAYLOAD
set -euo pipefail
fail() { echo "xen initramfs FAILED: $*" >&2; exit 1; }
[ $# = 2 ] || fail "usage: tools/xen/initramfs.sh OUTDIR PAYLOAD"
out=$1; payload=$2
[ -f "$payload" ] || fail "payload $payload not found"
kver=${KVER:-$(ls /lib/modules | sort -V | tail -1)}
kernel=${DOMU_KERNEL:-/boot/vmlinuz-$kver}
[ -f "$kernel" ] || fail "no $kernel"
XENBIN=/usr/lib/xen-4.17/bin
[ -x $XENBIN/xl ] || fail "$XENBIN/xl missing (apt-get install xen-utils-4.17)"
BUSYBOX=$(command -v busybox) || fail "no busybox (apt-get install busybox-static)"
file -L "$BUSYBOX" 2>/dev/null | grep -q 'statically linked' || ldd "$BUSYBOX" 2>&1 | grep -q 'not a dynamic' \
    || fail "$BUSYBOX is not static (apt-get install busybox-static)"
mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d /tmp/resex-xen-initramfs.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# A directory tree into a gzip'd newc cpio.
pack() { (cd "$1" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$2"; }

# ---- domU -----------------------------------------------------------------------------------
u=$tmp/domu
mkdir -p "$u"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev}
cp "$BUSYBOX" "$u/bin/busybox"
# DOMU_EXTRA: static binaries for the domU's /bin; DOMU_RUN: a command the domU starts in the
# background (its output on the domU's console) before it spins.
for f in ${DOMU_EXTRA:-}; do cp "$f" "$u/bin/"; done
cat > "$u/init" <<INIT
#!/bin/busybox sh
/bin/busybox --install -s
mount -t proc proc /proc
mount -t devtmpfs dev /dev
${DOMU_RUN:+($DOMU_RUN) &}
echo "xen-domu: up, spinning"
while :; do :; done
INIT
chmod +x "$u/init"
pack "$u" "$out/domu.cpio.gz"

# ---- domv (optional) ------------------------------------------------------------------------
# A guest that runs one command (e.g. the agent) in the foreground and then idles; the devices
# under /dev (/dev/xen/xenbus), /proc and /sys are there for it.
rm -f "$out/domv.cpio.gz"
if [ -n "${DOMV_RUN:-}" ]; then
    v=$tmp/domv
    mkdir -p "$v"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp}
    cp "$BUSYBOX" "$v/bin/busybox"
    for f in ${DOMV_EXTRA:-}; do
        [ -f "$f" ] || fail "DOMV_EXTRA file $f not found"
        cp "$f" "$v/bin/"
    done
    printf '%s\n' "$DOMV_RUN" > "$v/run.sh"
    cat > "$v/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
echo "xen-domv: up ($(uname -r)); mounted: $(cut -d' ' -f2,3 /proc/mounts | tr ' \n' ':,'); /dev/xen: $(ls /dev/xen 2>/dev/null | tr '\n' ' ')"
echo "xen-domv: running: $(cat /run.sh)"
sh /run.sh
echo "xen-domv: command exited $?"
while :; do sleep 3600; done
INIT
    chmod +x "$v/init"
    pack "$v" "$out/domv.cpio.gz"
elif [ -n "${DOMV_EXTRA:-}" ]; then
    fail "DOMV_EXTRA without DOMV_RUN"
fi

# ---- dom0 -----------------------------------------------------------------------------------
d=$tmp/dom0
mkdir -p "$d"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,run,tmp,root,lib/x86_64-linux-gnu,lib64,lib/modules}
mkdir -p "$d"/{etc/xen/scripts,var/lib/xen/dump,var/lib/xenstored,var/log/xen/console,domu} "$d$XENBIN"
ln -s ../lib "$d/usr/lib"            # /usr/lib/x86_64-linux-gnu and /usr/lib/xen-4.17 both work
ln -s ../run "$d/var/run"            # /var/run/xen, /var/run/xenstored live on the tmpfs
ln -s ../run/lock "$d/var/lock"      # xl's lock file /var/lock/xl
cp "$BUSYBOX" "$d/bin/busybox"
echo "root:x:0:0:root:/root:/bin/sh" > "$d/etc/passwd"
echo "root:x:0:" > "$d/etc/group"
: > "$d/etc/xen/xl.conf"

# Every libxen*.so* (symlinks kept), so that dlopen("libxenctrl.so") and friends find the
# unversioned names (these come from libxen-dev) as well as the sonames.
for l in /usr/lib/x86_64-linux-gnu/libxen*.so*; do
    cp -a "$l" "$d/lib/x86_64-linux-gnu/"
done
for n in libxenctrl.so libxenforeignmemory.so libxenstore.so; do
    [ -e "$d/lib/x86_64-linux-gnu/$n" ] || echo "xen initramfs: warning: no $n (apt-get install libxen-dev)" >&2
done

# FILE DEST: copy a binary and the shared libraries (and the loader) ldd lists for it, at the
# paths where the loader looks for them.
copy_bin() {
    cp -L "$1" "$d$2"
    local l
    for l in $(ldd "$1" 2>/dev/null | grep -o '/[^ ]*' || true); do
        [ -e "$d$l" ] && continue
        mkdir -p "$d$(dirname "$l")"; cp -L "$l" "$d$l"
    done
}
for b in xl xenstored xenconsoled xen-init-dom0 xentop libxl-save-helper xenstore-control; do
    [ -x "$XENBIN/$b" ] || fail "$XENBIN/$b missing"
    copy_bin "$XENBIN/$b" "$XENBIN/$b"
    ln -sf "$XENBIN/$b" "$d/usr/sbin/$b"
done
# glibc dlopens libgcc_s.so.1 for pthread_cancel (xl create aborts without it: "libgcc_s.so.1
# must be installed for pthread_cancel to work"); ldd does not list it.
cp -L /lib/x86_64-linux-gnu/libgcc_s.so.1 "$d/lib/x86_64-linux-gnu/"
# The xenstore-* tools are one binary (xenstore) that looks at its name.
copy_bin /usr/bin/xenstore /usr/bin/xenstore
for t in read write ls list rm exists chmod watch; do ln -s xenstore "$d/usr/bin/xenstore-$t"; done
for b in ${EXTRA:-}; do
    [ -f "$b" ] || fail "EXTRA file $b not found"
    copy_bin "$b" "/bin/$(basename "$b")"
done

# Modules, with their dependencies first (modules.dep), decompressed.
dep=/lib/modules/$kver/modules.dep
[ -f "$dep" ] || fail "no $dep"
order=""
add_module() { # NAME (as in the file name, without .ko*)
    local path deps x
    path=$(grep -E "(^|/)$1\.ko(\.xz|\.zst|\.gz)?:" "$dep" | head -1) || true
    [ -n "$path" ] || fail "module $1 not found for kernel $kver"
    deps=${path#*:}; path=${path%%:*}
    for x in $deps; do x=$(basename "$x"); add_module "${x%%.ko*}"; done
    case " $order " in *" $1 "*) return ;; esac
    case "$path" in
        *.ko.xz) xz -dc "/lib/modules/$kver/$path" > "$d/lib/modules/$1.ko" ;;
        *.ko.zst) zstd -qdc "/lib/modules/$kver/$path" > "$d/lib/modules/$1.ko" ;;
        *.ko.gz) gzip -dc "/lib/modules/$kver/$path" > "$d/lib/modules/$1.ko" ;;
        *) cp "/lib/modules/$kver/$path" "$d/lib/modules/$1.ko" ;;
    esac
    order="$order $1"
}
for m in xen-privcmd xen-evtchn xen-gntdev xen-gntalloc xenfs; do add_module $m; done

# The domU, and its configuration for `xl create /domu/domu.cfg`.
cp "$kernel" "$d/domu/vmlinuz"
cp "$out/domu.cpio.gz" "$d/domu/initrd"
# rodata=off: see DOM0_ARGS in boot.sh (the W+X check takes ~30 s of TCG).
cat > "$d/domu/domu.cfg" <<'CFG'
type = "pv"
name = "domu"
kernel = "/domu/vmlinuz"
ramdisk = "/domu/initrd"
extra = "console=hvc0 rdinit=/init quiet rodata=off"
memory = 256
vcpus = 1
on_crash = "preserve"
CFG

if [ -f "$out/domv.cpio.gz" ]; then
    cp "$out/domv.cpio.gz" "$d/domu/domv.cpio.gz"
    cat > "$d/domu/domv.cfg" <<'CFG'
type = "pv"
name = "domv"
kernel = "/domu/vmlinuz"
ramdisk = "/domu/domv.cpio.gz"
extra = "console=hvc0 rdinit=/init quiet rodata=off"
memory = 256
vcpus = 1
on_crash = "preserve"
CFG
fi

cp "$payload" "$d/payload.sh"
cat > "$d/init" <<INIT
#!/bin/busybox sh
# dom0's init: Xen toolstack up, then /payload.sh, then power off.
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin:$XENBIN TERM=dumb HOME=/root
t() { cut -d' ' -f1 /proc/uptime; }
say() { echo "xen-dom0: [\$(t)s] \$*"; }
die() { say "FAILED: \$*"; poweroff -f; sleep 5; reboot -f; }
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /dev/pts; mount -t devpts devpts /dev/pts   # xenconsoled gives domains ptys
mount -t tmpfs run /run; mkdir -p /run/xen /run/xenstored /run/lock
mount -t tmpfs tmp /tmp
say "kernel up (\$(uname -r)), loading modules:$order"
for m in $order; do insmod /lib/modules/\$m.ko || die "insmod \$m"; done
mount -t xenfs xenfs /proc/xen || die "mount xenfs"
xenstored --pid-file /run/xen/xenstored.pid || die "xenstored"
for _ in \$(seq 100); do [ -S /run/xenstored/socket ] && break; sleep 0.1; done
[ -S /run/xenstored/socket ] || die "xenstored socket"
xen-init-dom0 >/tmp/xen-init-dom0.log 2>&1 || { cat /tmp/xen-init-dom0.log; die "xen-init-dom0"; }
# Guests' consoles are logged to /var/log/xen/console/guest-NAME.log.
xenconsoled --pid-file=/run/xen/xenconsoled.pid --log=guest --log-dir=/var/log/xen/console \
    || die "xenconsoled"
say "toolstack up"
sh /payload.sh
say "payload exited \$?"
poweroff -f
INIT
chmod +x "$d/init"
pack "$d" "$out/dom0.cpio.gz"
domv=; [ -f "$out/domv.cpio.gz" ] && domv=", $out/domv.cpio.gz ($(du -h "$out/domv.cpio.gz" | cut -f1))"
echo "xen initramfs: $out/dom0.cpio.gz ($(du -h "$out/dom0.cpio.gz" | cut -f1)), $out/domu.cpio.gz ($(du -h "$out/domu.cpio.gz" | cut -f1))$domv, kernel $kver, modules:$order"
