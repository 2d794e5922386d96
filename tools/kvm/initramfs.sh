#!/usr/bin/env bash
# Builds a busybox initramfs for a test guest: virtio-serial modules from the host's Debian
# kernel, and an /init that runs MODE (kernel command line `resex.mode=`):
#   busy   - spin (a guest that wants a whole CPU, for the cap checks)
#   agent  - /bin/resex-agent --vm (give the image a static resex-agent): the agent and BenchEx's
#            server, reaching softhca over org.resex.hca.0, the daemon over org.resex.agent.0,
#            and BenchEx clients over org.resex.bench.0
#   script - /bin/SCRIPT (`resex.script=SCRIPT`, one of the extra binaries), then power off
# Extra binaries go to /bin with the shared libraries `ldd` lists for them; INITRD_MODULES
# (paths of .ko files, in load order) are loaded after the virtio modules. INITRD_FILES (paths)
# are copied to the same path in the image, with the libraries `ldd` lists for them if any: for
# files found by path rather than on PATH (a dlopen'ed library, a config file).
# Usage: [INITRD_MODULES="a.ko b.ko"] [INITRD_FILES="/x/y.so /etc/z"] \
#        tools/kvm/initramfs.sh OUT.cpio.gz [EXTRA_BINARY...]
set -euo pipefail
out=$1; shift
kver=${KVER:-$(ls /lib/modules | sort -V | tail -1)}  # KVER: the guest kernel's version
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{bin,proc,sys,dev,tmp,lib/modules}
cp "$(command -v busybox)" "$work/bin/busybox"
# Load order: each after what it depends on.
mods="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_console"
for m in $mods; do
    f=$(find "/lib/modules/$kver" -name "$m.ko*" | head -1)
    [ -n "$f" ] || { echo "initramfs: module $m not found for kernel $kver" >&2; exit 1; }
    case "$f" in
        *.ko.xz) xz -dc "$f" > "$work/lib/modules/$m.ko" ;;
        *.ko.zst) zstd -qdc "$f" > "$work/lib/modules/$m.ko" ;;
        *) cp "$f" "$work/lib/modules/$m.ko" ;;
    esac
done
for m in ${INITRD_MODULES:-}; do
    n=$(basename "$m"); n=${n%%.ko*}
    case "$m" in
        *.ko.xz) xz -dc "$m" > "$work/lib/modules/$n.ko" ;;
        *.ko.zst) zstd -qdc "$m" > "$work/lib/modules/$n.ko" ;;
        *) cp "$m" "$work/lib/modules/$n.ko" ;;
    esac
    mods="$mods $n"
done
add_libs() { # FILE: its shared libraries (and the loader) at the paths it looks for them
    local l
    for l in $(ldd "$1" 2>/dev/null | grep -o '/[^ ]*' || true); do
        mkdir -p "$work$(dirname "$l")"; cp -L "$l" "$work$l"
    done
}
for b in "$@"; do
    cp "$b" "$work/bin/"; strip --strip-debug "$work/bin/$(basename "$b")" 2>/dev/null || true
    add_libs "$b"
done
for f in ${INITRD_FILES:-}; do
    [ -e "$f" ] || { echo "initramfs: $f not found" >&2; exit 1; }
    mkdir -p "$work$(dirname "$f")"; cp -L "$f" "$work$f"
    add_libs "$f"
done
cat > "$work/init" <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $mods; do insmod /lib/modules/\$m.ko; done
mode=busy
for a in \$(cat /proc/cmdline); do case "\$a" in resex.mode=*) mode=\${a#resex.mode=};; esac; done
# A port's name comes from the host after the driver binds: wait (at most 5 s) for every name.
i=0
while [ \$i -lt 50 ]; do
    unnamed=0; ports=0
    for p in /sys/class/virtio-ports/*; do
        [ -e "\$p/name" ] || continue
        ports=1
        [ -n "\$(cat \$p/name)" ] || unnamed=1
    done
    # The console driver bound and no port yet: they are still being added.
    ls /sys/bus/virtio/drivers/virtio_console/ 2>/dev/null | grep -q virtio && [ \$ports = 0 ] && unnamed=1
    [ \$unnamed = 0 ] && break
    usleep 100000 2>/dev/null || sleep 1
    i=\$((i + 1))
done
echo "resex-guest: up, mode \$mode"
for p in /sys/class/virtio-ports/*; do [ -e "\$p/name" ] && echo "resex-guest: port \$(basename \$p) = \$(cat \$p/name)"; done
case "\$mode" in
    agent) RUST_LOG=info exec /bin/resex-agent --vm --name "$(cat /proc/sys/kernel/hostname)" \
        --listen port:org.resex.bench.0 --polling adaptive ;;
    script)
        script=
        for a in \$(cat /proc/cmdline); do case "\$a" in resex.script=*) script=\${a#resex.script=};; esac; done
        sh "/bin/\$script" || echo "resex-guest: /bin/\$script exited \$?"
        echo "resex-guest: powering off"
        poweroff -f ;;
    *) while true; do :; done ;;
esac
INIT
chmod +x "$work/init"
(cd "$work" && find . | cpio -o -H newc 2>/dev/null | gzip) > "$out"
echo "initramfs: $out ($(du -h "$out" | cut -f1), kernel $kver)"
