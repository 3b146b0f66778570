#!/bin/sh
# Builds an OpenWrt package (.ipk, for opkg) of the braid client: the binary, the procd init
# script (deploy/braid.init) and the example client config as a conffile. See deploy/INSTALL.md,
# "OpenWrt".
#
#   deploy/openwrt/build-ipk.sh --arch OPKG_ARCH --target RUST_TARGET [--out DIR]
#   deploy/openwrt/build-ipk.sh --arch OPKG_ARCH --binary FILE [--out DIR]
#
# --arch    the router's opkg architecture, as `opkg print-architecture` shows it on the router
#           (e.g. aarch64_cortex-a53, arm_cortex-a7_neon-vfpv4, x86_64)
# --target  build the binary with cargo for this Rust target (e.g. aarch64-unknown-linux-musl),
#           without debug info and stripped; the cross linker comes from the environment
#           (CARGO_TARGET_<TRIPLE>_LINKER, CC_<triple>), see deploy/INSTALL.md
# --binary  package this already built binary instead
# --out     where to write braid_<version>-1_<arch>.ipk (default: target/openwrt)
#
# Exit codes: 0 written, 2 bad usage (the message names the flag or file), 1 the build failed.
set -eu

usage() {
    echo "usage: $0 --arch OPKG_ARCH (--target RUST_TARGET | --binary FILE) [--out DIR]" >&2
    exit 2
}

bad() {
    echo "build-ipk: $*" >&2
    exit 2
}

root=$(cd "$(dirname "$0")/../.." && pwd)
arch=""
target=""
binary=""
out="$root/target/openwrt"

while [ $# -gt 0 ]; do
    case "$1" in
        --arch | --target | --binary | --out)
            [ $# -ge 2 ] || bad "$1 needs a value"
            case "$1" in
                --arch) arch=$2 ;;
                --target) target=$2 ;;
                --binary) binary=$2 ;;
                --out) out=$2 ;;
            esac
            shift 2
            ;;
        -h | --help) usage ;;
        *) bad "unknown argument '$1'" ;;
    esac
done

[ -n "$arch" ] || bad "--arch is required (the router's \`opkg print-architecture\`)"
case "$arch" in
    *[!A-Za-z0-9_.+-]* | [!A-Za-z0-9]*) bad "--arch '$arch' is not an opkg architecture name (letters, digits, '_', '.', '+', '-')" ;;
esac
if [ -n "$target" ] && [ -n "$binary" ]; then
    bad "give --target or --binary, not both"
fi
[ -n "$target" ] || [ -n "$binary" ] || bad "give --target RUST_TARGET or --binary FILE"
case "$target" in
    *[!A-Za-z0-9_.-]*) bad "--target '$target' is not a Rust target triple" ;;
esac

version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version = "\([^"]*\)"$/\1/p' "$root/Cargo.toml")
[ -n "$version" ] || { echo "build-ipk: no [workspace.package] version in $root/Cargo.toml" >&2; exit 1; }

if [ -n "$target" ]; then
    # A router has little flash: no debug info, symbols stripped (about a fifth of the size).
    if ! (cd "$root" && CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols \
        cargo build --release --locked -p braid-proxy --bin braid --target "$target"); then
        echo "build-ipk: cargo build for $target failed" >&2
        exit 1
    fi
    binary="${CARGO_TARGET_DIR:-$root/target}/$target/release/braid"
fi
[ -f "$binary" ] || bad "--binary '$binary': no such file"
[ -x "$binary" ] || bad "--binary '$binary' is not executable"

# Reproducible archives: fixed owner, sorted names, one time stamp.
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}
pack() { # pack ARCHIVE DIR: ./* of DIR as a gzip'd tar
    tar --format=gnu --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
        -C "$2" -cf - . | gzip -n > "$1"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
data="$work/data"
control="$work/control"
mkdir -p "$data/usr/bin" "$data/etc/init.d" "$data/etc/braid" "$control"
cp "$binary" "$data/usr/bin/braid"
chmod 0755 "$data/usr/bin/braid"
cp "$root/deploy/braid.init" "$data/etc/init.d/braid"
chmod 0755 "$data/etc/init.d/braid"
cp "$root/config/client.toml" "$data/etc/braid/client.toml"
# It holds the user's key: readable by root alone (the daemon runs as root under procd).
chmod 0700 "$data/etc/braid"
chmod 0600 "$data/etc/braid/client.toml"

size=$(($(find "$data" -type f -exec cat {} + | wc -c)))
cat > "$control/control" <<EOF
Package: braid
Version: $version-1
Depends: libc
License: Apache-2.0
Section: net
Architecture: $arch
Installed-Size: $size
Maintainer: braid developers
Description: Multipath QUIC proxy client: spreads traffic over every uplink (Wi-Fi, LTE, 5G)
 to a braid server. SOCKS5 and HTTP CONNECT inbounds; the TUN inbound needs kmod-tun.
EOF
echo /etc/braid/client.toml > "$control/conffiles"
cat > "$control/postinst" <<'EOF'
#!/bin/sh
[ -n "${IPKG_INSTROOT:-}" ] && exit 0
echo "braid: edit /etc/braid/client.toml, then: /etc/init.d/braid enable && /etc/init.d/braid start"
exit 0
EOF
cat > "$control/prerm" <<'EOF'
#!/bin/sh
[ -n "${IPKG_INSTROOT:-}" ] && exit 0
/etc/init.d/braid stop 2>/dev/null
/etc/init.d/braid disable 2>/dev/null
exit 0
EOF
chmod 0755 "$control/postinst" "$control/prerm"
chmod 0644 "$control/control" "$control/conffiles"

outer="$work/ipk"
mkdir -p "$outer"
echo "2.0" > "$outer/debian-binary"
pack "$outer/data.tar.gz" "$data"
pack "$outer/control.tar.gz" "$control"
mkdir -p "$out"
ipk="$out/braid_${version}-1_${arch}.ipk"
# opkg reads the outer archive as a gzip'd tar (what OpenWrt's own ipkg-build writes).
tar --format=gnu --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -C "$outer" \
    -cf - ./debian-binary ./data.tar.gz ./control.tar.gz | gzip -n > "$ipk"
echo "$ipk"
