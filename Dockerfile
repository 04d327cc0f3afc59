# moeserve container image: the daemon and its embedded default model on Debian 12.
#
# Two stages, both on debian:bookworm-slim (the only base image; nothing else is pulled):
#   build    installs the toolchain and libraries of scripts/install-deps.sh (less
#            `check`: the unit tests are not built here; plus ocl-icd-opencl-dev, see
#            below), then `meson setup -Dtests=disabled --buildtype=release` and
#            `ninja`, which also generates the default model (tools/gptoss_ckpt.py,
#            python3 + numpy) into build/default-model.
#   runtime  only the shared libraries the built binary links (found with ldd and
#            dpkg -S in the build stage, so the list follows the code) plus libnuma1,
#            the binary in /usr/local/bin/moeserve, the model in
#            /usr/share/moeserve/default-model, and a non-root user `moeserve`.
#
# The binary's compiled-in default model path is the build stage's build folder;
# MOESERVE_MODEL points it at the installed copy instead (--model DIR overrides it).
#
# With Docker (or Podman with a registry):
#   docker build -t moeserve .
#   docker run --rm moeserve                              # generate from ids 1..8, 16 tokens
#   docker run --rm moeserve inspect                      # describe the default model
#   docker run --rm moeserve generate --tokens 1,2,3 --max-tokens 8
#   docker run --rm -v /path/to/model:/model:ro moeserve inspect --model /model
#
# In this sandbox (no image registry; the base image is bootstrapped from Debian's archive):
#   . ../shared/tools/container-env.sh        # podman, runc, debootstrap; defines $PODMAN*
#   $PODMAN build $PODMAN_BUILD_FLAGS -t moeserve .
#   $PODMAN run $PODMAN_RUN_FLAGS --rm moeserve
#   $PODMAN run $PODMAN_RUN_FLAGS --rm moeserve inspect
#
# Needs no registry beyond the base image: the FROM lines name only
# debian:bookworm-slim, and every package comes from Debian's apt archive.

# ---- build ------------------------------------------------------------------
FROM debian:bookworm-slim AS build
ARG DEBIAN_FRONTEND=noninteractive

# scripts/install-deps.sh's packages, without `check` (tests are disabled below),
# plus ocl-icd-opencl-dev: only a Recommends of libdnnl-dev, but Debian's oneDNN
# is built with the OpenCL GPU runtime and its CMake config (dnnl-config.cmake)
# does find_package(OpenCL REQUIRED), so meson cannot find dnnl without it.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      gcc libc6-dev pkg-config cmake meson ninja-build \
      libcjson-dev libmicrohttpd-dev libdnnl-dev ocl-icd-opencl-dev libnuma-dev \
      python3 python3-numpy \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# Release build; -Dtests=disabled skips the Check dependency and tests/.
# `meson install` puts the binary (stripped) in /staging/usr/local/bin.
RUN meson setup build -Dtests=disabled --buildtype=release \
 && ninja -C build \
 && meson install -C build --destdir /staging --strip \
 && mkdir -p /staging/usr/share/moeserve \
 && cp -r build/default-model /staging/usr/share/moeserve/default-model \
 && chmod -R a+rX /staging/usr/share/moeserve

# The Debian packages that own the shared libraries the binary links; the
# runtime stage installs exactly these (plus libnuma1). Fails on an unresolved
# library or one that no package owns.
RUN set -eu; \
    bin=/staging/usr/local/bin/moeserve; \
    if ldd "$bin" | grep -q 'not found'; then ldd "$bin" >&2; exit 1; fi; \
    for lib in $(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'); do \
      dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null \
        || { echo "no Debian package owns $lib" >&2; exit 1; }; \
    done > /tmp/owners; \
    sed 's/:.*//' /tmp/owners | sort -u > /runtime-packages; \
    echo "runtime packages:" $(cat /runtime-packages)

# ---- runtime ----------------------------------------------------------------
FROM debian:bookworm-slim AS runtime
ARG DEBIAN_FRONTEND=noninteractive

# libnuma1 is listed explicitly: NUMA-aware placement is coming to the daemon.
# `apt-get clean` also drops apt's package caches (/var/cache/apt/*.bin, ~80 MB).
COPY --from=build /runtime-packages /usr/share/moeserve/runtime-packages
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      $(cat /usr/share/moeserve/runtime-packages) libnuma1 \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*

RUN useradd --system --user-group --create-home --home-dir /var/lib/moeserve \
      --shell /usr/sbin/nologin moeserve

COPY --from=build /staging/ /
RUN if ldd /usr/local/bin/moeserve | grep -q 'not found'; then \
      ldd /usr/local/bin/moeserve >&2; exit 1; fi \
 && moeserve --version

ENV MOESERVE_MODEL=/usr/share/moeserve/default-model
USER moeserve
WORKDIR /var/lib/moeserve

# For the upcoming `moeserve serve` (HTTP, libmicrohttpd); nothing listens yet.
# A HEALTHCHECK arrives with the server.
EXPOSE 8080

ENTRYPOINT ["moeserve"]
# Until `serve` lands: one greedy generation on the default model; the generated
# ids are the last line of stdout. Becomes CMD ["serve", ...] with the server.
CMD ["generate", "--tokens", "1,2,3,4,5,6,7,8", "--max-tokens", "16"]
