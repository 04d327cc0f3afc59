#!/usr/bin/env bash
# llama.cpp for side-by-side benchmarks, from Debian's own binaries: the
# llama.cpp and ggml packages of Debian unstable (this machine's bookworm has
# none, and only Debian's archive is reachable), unpacked with the newer C
# and C++ runtime they need into build-llama/root and run through that
# root's own dynamic loader. Nothing is installed on the system.
#
#   tools/llamacpp.sh fetch         download (signed index, SHA-256 checked) and unpack
#   tools/llamacpp.sh version       print llama.cpp's version and the ggml CPU variant
#   tools/llamacpp.sh TOOL ARGS...  run llama-bench, llama-cli, ... (fetches first)
#
# ggml ships one CPU backend per instruction-set level; Debian's build loads
# them from a fixed system path, so this picks the variant for this CPU from
# /proc/cpuinfo (GGML_BACKEND_PATH) the way ggml's own scoring would: AMX
# (sapphirerapids), AVX-512 with BF16 and VBMI (zen4), AVX-512 VNNI
# (cascadelake), AVX-512 (skylakex), AVX2 (haswell), else the x64 baseline.
# MOESERVE_GGML_VARIANT=name overrides it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${MOESERVE_LLAMA_DIR:-$here/build-llama}
root=$dir/root
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=sid
pkgs=(llama.cpp-tools libllama0 libggml0 libc6 libstdc++6 libgcc-s1 libgomp1 libssl3t64 zlib1g libzstd1)

fetch() {
  [ -x "$root/usr/bin/llama-bench" ] && return 0
  mkdir -p "$dir/debs" && cd "$dir"
  curl -fsS -o InRelease "$mirror/dists/$suite/InRelease"
  gpgv --keyring /usr/share/keyrings/debian-archive-keyring.gpg InRelease 2>/dev/null ||
    { echo "llamacpp.sh: $suite's InRelease does not verify against Debian's keyring" >&2; exit 1; }
  curl -fsS -o Packages.xz "$mirror/dists/$suite/main/binary-amd64/Packages.xz"
  want=$(awk '/^SHA256:/{s=1; next} /^[A-Z]/{s=0} s && $3 == "main/binary-amd64/Packages.xz" {print $1}' InRelease)
  [ "$(sha256sum Packages.xz | cut -d' ' -f1)" = "$want" ] ||
    { echo "llamacpp.sh: Packages.xz does not match the signed index" >&2; exit 1; }
  for p in "${pkgs[@]}"; do
    read -r file sum < <(xz -dc Packages.xz | awk -v p="$p" '
      /^Package: /{hit = ($2 == p)} hit && /^Filename: /{f = $2} hit && /^SHA256: /{print f, $2; exit}')
    [ -n "$file" ] || { echo "llamacpp.sh: $suite has no package $p" >&2; exit 1; }
    deb=debs/$(basename "$file")
    [ -f "$deb" ] || curl -fsS -o "$deb" "$mirror/$file"
    [ "$(sha256sum "$deb" | cut -d' ' -f1)" = "$sum" ] ||
      { echo "llamacpp.sh: $deb fails its SHA-256" >&2; rm -f "$deb"; exit 1; }
    dpkg-deb -x "$deb" root
  done
  cd - >/dev/null
}

variant() {
  if [ -n "${MOESERVE_GGML_VARIANT:-}" ]; then echo "$MOESERVE_GGML_VARIANT"; return; fi
  local f; f=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  has() { for x in "$@"; do [[ $f == *" $x "* ]] || return 1; done; }
  if has amx_tile avx512_fp16 avx512_bf16; then echo sapphirerapids
  elif has avx512f avx512_bf16 avx512vbmi avx512_vnni; then echo zen4
  elif has avx512f avx512_vnni; then echo cascadelake
  elif has avx512f avx512bw avx512vl; then echo skylakex
  elif has avx2 fma f16c; then echo haswell
  else echo x64; fi
}

run() {
  local tool=$1; shift
  local lib=$root/usr/lib/x86_64-linux-gnu
  GGML_BACKEND_PATH=$lib/ggml/backends0/libggml-cpu-$(variant).so \
    "$root/usr/lib64/ld-linux-x86-64.so.2" --library-path "$lib:$lib/llama:$root/lib/x86_64-linux-gnu" \
    "$root/usr/bin/$tool" "$@" 2> >(grep -v 'failed to enumerate' >&2)
}

case ${1:-} in
  fetch) fetch ;;
  version)
    fetch
    echo "llama.cpp $(run llama-bench --version 2>&1 | grep -m1 '^version' | cut -d' ' -f2-), ggml cpu variant $(variant)" ;;
  llama-*) fetch; run "$@" ;;
  *) sed -n '2,17p' "$0"; exit 64 ;;
esac
