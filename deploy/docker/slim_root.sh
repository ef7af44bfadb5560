#!/usr/bin/env bash
# Makes the root filesystem of one of farcall's images. It runs as root in a
# Debian stage of deploy/docker/Dockerfile where the binaries and their
# packages are installed, and copies into DEST only what the binaries need at
# run time; the image is then DEST on `scratch`.
#
#   slim_root.sh DEST [--with="PKG..."] BINARY...
#
# DEST gets:
#   - each BINARY, at the same path;
#   - every Debian package that owns a library the binaries load (found with
#     ldd), then the packages of the libraries those packages' own files
#     load, until none is new. Only those packages come, not every package
#     they depend on: the host's agent links HIP, say, but not the compiler
#     (comgr, LLVM) that HIP's package depends on and loads only to compile
#     kernels, which the cpu image never does;
#   - each --with package and every package it depends on, for what is
#     loaded or run without being linked (PoCL's compiler and linker, HIP's
#     comgr);
#   - /etc/passwd and /etc/group (root, nobody, farcall 65532),
#     nsswitch.conf, the dynamic loader's cache, os-release, an empty /tmp
#     (mode 1777), and /var/lib/dpkg/status, which lists the packages taken
#     so that image scanners know what the image holds.
# Never: a package Debian marks Essential (the shells, coreutils, dpkg,
# login, util-linux, perl-base, ...), apt, documentation, manual pages,
# translations, iconv modules. It fails if DEST ends up with a setuid or
# setgid file, a shell or a package manager.
set -euo pipefail

die() { printf 'slim_root: error: %s\n' "$*" >&2; exit 1; }

(($# >= 2)) || die "usage: slim_root.sh DEST [--with=\"PKG...\"] BINARY..."
dest=$1
shift
with=()
binaries=()
for a in "$@"; do
  case "$a" in
    --with=*) read -r -a w <<<"${a#--with=}"; with+=("${w[@]}") ;;
    *) [ -x "$a" ] || die "$a is not an executable file"; binaries+=("$a") ;;
  esac
done
[ ! -e "$dest" ] || die "$dest exists"

# Paths as they are once the top-level links of a merged /usr are followed
# (/lib/x86_64-linux-gnu/libc.so.6 is /usr/lib/x86_64-linux-gnu/libc.so.6):
# packages and ldd name both, DEST holds the second.
declare -A toplink=()
for d in /*; do
  [ -L "$d" ] && toplink[${d#/}]=$(readlink "$d")
done
canon() {  # PATH: sets C (no subshell: it runs once for every packaged path)
  local top=${1#/}
  top=${top%%/*}
  C=$1
  if [ -n "${toplink[$top]:-}" ]; then
    C="/${toplink[$top]}${1#/"$top"}"
  fi
}

# The installed packages: who owns each path, which are Essential, what each
# depends on, and which package provides each virtual name.
declare -A owner=() essential=() depends=() provider=() installed=()
# (Fields split on \x1f: a tab would fold the empty ones away.)
while IFS=$'\x1f' read -r status pkg ess prov deps; do
  [ "$status" = "ii " ] || continue
  installed[$pkg]=1
  [ "$ess" = yes ] && essential[$pkg]=1
  depends[$pkg]=$deps
  IFS=, read -r -a ps <<<"$prov"
  for p in "${ps[@]}"; do
    p=${p%%(*}
    p=${p// /}
    [ -n "$p" ] && provider[$p]=$pkg
  done
done < <(dpkg-query -W -f=$'${db:Status-Abbrev}\x1f${Package}\x1f${Essential}\x1f${Provides}\x1f${Pre-Depends}, ${Depends}\n')
for list in /var/lib/dpkg/info/*.list; do
  pkg=${list##*/}
  pkg=${pkg%.list}
  pkg=${pkg%%:*}
  [ -n "${installed[$pkg]:-}" ] || continue
  while IFS= read -r p; do
    canon "$p"
    owner[$C]=$pkg
  done <"$list"
done
left_out() { [ -n "${essential[$1]:-}" ] || [ "$1" = apt ]; }

# The packages a package depends on (first installed alternative of each).
depends_of() {
  local group alt name
  IFS=, read -r -a groups <<<"${depends[$1]:-}"
  for group in "${groups[@]}"; do
    IFS='|' read -r -a alts <<<"$group"
    for alt in "${alts[@]}"; do
      name=${alt%%(*}
      name=${name// /}
      name=${name%%:*}
      [ -n "$name" ] || continue
      [ -z "${installed[$name]:-}" ] && name=${provider[$name]:-}
      if [ -n "$name" ] && [ -n "${installed[$name]:-}" ]; then
        printf '%s\n' "$name"
        break
      fi
    done
  done
}

declare -A taken=() copy=()
elf_queue=()
take() {  # PKG: copy its files, and look at its libraries and programs next
  local pkg=$1 p c
  [ -z "${taken[$pkg]:-}" ] || return 0
  left_out "$pkg" && die "the image would need $pkg, which is left out (Essential, or apt)"
  taken[$pkg]=1
  while IFS= read -r p; do
    canon "$p"
    c=$C
    case "$c" in
      /usr/share/doc/*|/usr/share/man/*|/usr/share/info/*|/usr/share/lintian/*) continue ;;
      /usr/share/locale/*|/usr/share/bug/*|/usr/lib/x86_64-linux-gnu/gconv/*) continue ;;
    esac
    [ -L "$c" ] || [ -f "$c" ] || continue
    copy[$c]=1
    if [ -f "$c" ] && [ ! -L "$c" ] && { [ -x "$c" ] || [[ "$c" == *.so* ]]; }; then
      elf_queue+=("$c")
    fi
  done <"$(ls /var/lib/dpkg/info/"$pkg".list /var/lib/dpkg/info/"$pkg":*.list 2>/dev/null | head -n1)"
}

# --with packages and everything they depend on.
pending=("${with[@]}")
declare -A seen=()
while ((${#pending[@]})); do
  pkg=${pending[-1]}
  unset 'pending[-1]'
  [ -n "${seen[$pkg]:-}" ] && continue
  seen[$pkg]=1
  [ -n "${installed[$pkg]:-}" ] || die "--with: $pkg is not installed"
  left_out "$pkg" && continue  # e.g. a dependency on libc-bin or debconf's shell
  take "$pkg"
  mapfile -t more < <(depends_of "$pkg")
  pending+=("${more[@]}")
done

# The binaries, then the packages of every library loaded, until none is new.
for b in "${binaries[@]}"; do
  canon "$b"
  copy[$C]=1
done
elf_queue+=("${binaries[@]}")
declare -A looked=()
while ((${#elf_queue[@]})); do
  batch=()
  for f in "${elf_queue[@]}"; do
    [ -n "${looked[$f]:-}" ] || { looked[$f]=1; batch+=("$f"); }
  done
  elf_queue=()
  ((${#batch[@]})) || break
  while read -r lib; do
    canon "$lib"
    pkg=${owner[$C]:-}
    if [ -z "$pkg" ]; then
      c=$(readlink -f "$lib")
      pkg=${owner[$c]:-}
    fi
    [ -n "$pkg" ] || die "no Debian package owns $lib"
    take "$pkg"
  done < <(printf '%s\0' "${batch[@]}" | xargs -0 ldd 2>/dev/null |
           awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $2 ~ /^\(/ {print $1}' | sort -u)
done

# Copy, keeping modes, owners and links. Folders are made as needed (0755).
mkdir -p "$dest"
printf '%s\n' "${!copy[@]}" | sed 's|^/||' | sort |
  tar -C / --no-recursion -cf - -T - | tar -C "$dest" -xpf -
for top in "${!toplink[@]}"; do
  [ ! -e "$dest/${toplink[$top]}" ] || ln -s "${toplink[$top]}" "$dest/$top"
done

# What the runtime and the C library look for.
mkdir -p "$dest/etc" "$dest/tmp" "$dest/var/lib/dpkg" "$dest/usr/lib"
chmod 1777 "$dest/tmp"
cat >"$dest/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
farcall:x:65532:65532:farcall:/nonexistent:/usr/sbin/nologin
EOF
cat >"$dest/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
farcall:x:65532:
EOF
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$dest/etc/nsswitch.conf"
echo 'include /etc/ld.so.conf.d/*.conf' >"$dest/etc/ld.so.conf"
cp /usr/lib/os-release "$dest/usr/lib/os-release"
ln -s ../usr/lib/os-release "$dest/etc/os-release"
# shellcheck disable=SC2046
dpkg-query -s $(printf '%s\n' "${!taken[@]}" | sort) >"$dest/var/lib/dpkg/status"
ldconfig -r "$dest"

# What the image must not have.
bad=$(find "$dest" -xdev -perm /6000 ! -type l)
[ -z "$bad" ] || die "setuid or setgid files: $bad"
for p in sh bash dash rbash busybox dpkg apt apt-get; do
  for d in usr/bin usr/sbin usr/local/bin; do
    [ ! -e "$dest/$d/$p" ] || die "$dest/$d/$p is there"
  done
done
printf 'slim_root: %s: %s packages, %s files, %s\n' "$dest" "${#taken[@]}" "${#copy[@]}" \
  "$(du -sh "$dest" | cut -f1)"
