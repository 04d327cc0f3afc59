#!/usr/bin/env bash
# Install what moeserve needs to build, run and test on Debian 12 (bookworm).
# Idempotent: apt-get runs only when a package is missing.
set -euo pipefail

PKGS=(
  gcc libc6-dev pkg-config cmake meson ninja-build   # toolchain; cmake finds oneDNN
  libcjson-dev libmicrohttpd-dev libdnnl-dev libnuma-dev check libpcre2-dev
  ocl-icd-opencl-dev   # dnnl-config.cmake requires OpenCL; only a Recommends of libdnnl-dev
  python3 python3-numpy python3-yaml python3-jinja2 wrk  # tools/ and the golden tests; yaml: tests/deploy/deploy_check.py; jinja2: tests/models/chat_template.py; wrk: tests/deploy/load.sh
  openssl curl libgnutls28-dev   # tests/e2e/security.py's certificate and HTTPS client; gnutls: serve's TLS checks (libmicrohttpd-dev pulls it in too)
  hipcc libamdhip64-dev   # the rocm backend's GPU kernels (Debian's HIP 5.2: compiles for gfx90a/gfx940 without a GPU)
  clang   # libFuzzer targets (tests/fuzz, -Dfuzz=enabled): clang-14 and its libclang_rt.fuzzer
  prometheus   # promtool: tests/e2e/metrics_promtool.py parses /metrics as Prometheus does
  haproxy      # tests/deploy/balancer.py: replicas behind deploy/haproxy.cfg
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm run the tokenizer's independent reference (js-tiktoken);
# any installation will do, Debian's if there is none.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
