# moeserve container image: `moeserve serve`, the OpenAI-compatible HTTP daemon,
# on Debian 12, with a small embedded default model.
#
# Two variants, chosen by the build argument BACKEND:
#   cpu   (the default) the CPU backend only; built with -Drocm=disabled, so the
#         image neither needs nor links the HIP runtime.
#   rocm  also the ROCm backend (AMD Instinct GPUs through HIP): the build stage
#         adds Debian's hipcc and libamdhip64-dev and builds with -Drocm=enabled
#         for ROCM_TARGETS (default gfx90a,gfx940: the newest Debian 12's HIP 5.2
#         knows); the image sets MOESERVE_BACKEND=rocm, so `serve` uses GPU 0
#         (--device N / MOESERVE_DEVICE for another). `--backend cpu` still works.
#
# Two stages, both on debian:bookworm-slim (the only base image; nothing else is pulled):
#   build    installs the toolchain and libraries of scripts/install-deps.sh (less
#            `check` and Node.js: the tests are not built here; plus hipcc and
#            libamdhip64-dev for rocm), then
#            `meson setup -Dtests=disabled --buildtype=release -Drocm=...` and `ninja`.
#   runtime  only the shared libraries the built binary links (found with ldd and
#            dpkg -S in the build stage, so the list follows the code: for rocm
#            that is libamdhip64-5, which pulls the rest of the HIP runtime) plus
#            libnuma1, the binary in /usr/local/bin/moeserve, the default model (the
#            bf16 variant of models/default) in /usr/share/moeserve/default-model,
#            and a non-root user `moeserve` (uid/gid 10001, numeric in USER so
#            that Kubernetes' runAsNonRoot can verify it). No shell entrypoint, no curl: the HEALTHCHECK uses bash.
#
# The model: MOESERVE_MODEL=/models. In the image /models holds symlinks to the
# default model's files, so the image serves out of the box; a real checkpoint
# (config.json + safetensors + tokenizer.json) mounted read-only on /models
# replaces them:
#   docker build -t moeserve .
#   docker run --rm -p 8080:8080 moeserve                      # the default model
#   docker run --rm -p 8080:8080 -v /srv/gpt-oss-20b:/models:ro \
#       -e MOESERVE_SERVED_MODEL_NAME=gpt-oss-20b moeserve        # a real checkpoint
#   docker run --rm moeserve serve --help                      # every option and its env var
#   docker run --rm -v /srv/gpt-oss-20b:/models:ro moeserve inspect --model /models
# (--model DIR on the command line also works; MOESERVE_MODEL is only the default.)
#
# The ROCm variant: the GPU's device nodes go into the container, and the video
# group lets uid 10001 open them (where the host gives /dev/kfd to `render`
# instead, add that group's number: --group-add "$(getent group render | cut -d: -f3)"):
#   docker build --build-arg BACKEND=rocm -t moeserve:rocm .
#   docker run --device /dev/kfd --device /dev/dri --group-add video -p 8080:8080 \
#       -v /srv/gpt-oss-20b:/models:ro moeserve:rocm serve --backend rocm
# (`serve --backend rocm` spells out the image's default.) Without a GPU it exits
# 69: "moeserve: error: no ROCm/HIP device (hip: hipErrorNoDevice)".
#
# Configuration: every `serve` flag has a MOESERVE_* environment variable
# (server/options.h): MOESERVE_PORT, MOESERVE_API_KEY, MOESERVE_THREADS,
# MOESERVE_KV_CACHE_BYTES, MOESERVE_CTX_SIZE, MOESERVE_LOG_FORMAT=json,
# MOESERVE_BACKEND, MOESERVE_DEVICE, ...
# Set the port with MOESERVE_PORT rather than --port: the HEALTHCHECK reads it.
#
# Podman stores HEALTHCHECK only in the docker image format: build with
# `podman build --format docker` (Docker always does).
#
# In this sandbox (no image registry; the base image is bootstrapped from Debian's archive):
#   . ../shared/tools/container-env.sh        # podman, runc, debootstrap; defines $PODMAN*
#   $PODMAN build $PODMAN_BUILD_FLAGS --format docker -t moeserve .
#   $PODMAN run $PODMAN_RUN_FLAGS -d -e MOESERVE_PORT=8080 moeserve   # host network
#   curl http://127.0.0.1:8080/health
# tests/deploy/container.sh does this end to end (both variants; the rocm one only up
# to the missing GPU); deploy/ has Kubernetes examples (CPU and ROCm).

# cpu | rocm (see above); declared before the first FROM so both stages see it.
ARG BACKEND=cpu

# ---- build ------------------------------------------------------------------
FROM debian:bookworm-slim AS build
ARG DEBIAN_FRONTEND=noninteractive
ARG BACKEND
ARG ROCM_TARGETS=gfx90a,gfx940

# scripts/install-deps.sh's packages, without `check` and Node.js (tests are
# disabled below), plus ocl-icd-opencl-dev: only a Recommends of libdnnl-dev,
# but Debian's oneDNN is built with the OpenCL GPU runtime and its CMake config
# (dnnl-config.cmake) does find_package(OpenCL REQUIRED), so meson cannot find
# dnnl without it. rocm: hipcc (clang 15 with the ROCm device libraries) and
# the HIP headers and runtime to link against.
RUN case "$BACKEND" in \
      cpu) gpu_pkgs="" ;; \
      rocm) gpu_pkgs="hipcc libamdhip64-dev" ;; \
      *) echo "BACKEND=$BACKEND: use cpu or rocm" >&2; exit 1 ;; \
    esac \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
      gcc libc6-dev pkg-config cmake meson ninja-build \
      libcjson-dev libmicrohttpd-dev libdnnl-dev ocl-icd-opencl-dev libnuma-dev \
      libpcre2-dev \
      python3 python3-numpy \
      $gpu_pkgs \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# Release build; -Dtests=disabled skips the Check dependency and tests/ (and so
# Node.js). -Drocm is explicit either way: enabled fails the build where hipcc
# is missing instead of shipping a "rocm" image without HIP, disabled keeps the
# CPU image off the HIP runtime. `meson install` puts the binary (stripped; the
# GPU code objects live in an allocated section, .hip_fatbin, which strip
# keeps) in /staging/usr/local/bin.
RUN if [ "$BACKEND" = rocm ]; then rocm=enabled; else rocm=disabled; fi \
 && meson setup build -Dtests=disabled --buildtype=release \
      -Drocm=$rocm -Drocm_targets="$ROCM_TARGETS" \
 && ninja -C build \
 && meson install -C build --destdir /staging --strip \
 && mkdir -p /staging/usr/share/moeserve /staging/models \
 && cp -r models/default/bf16 /staging/usr/share/moeserve/default-model \
 && for f in models/default/bf16/*; do \
      ln -s "/usr/share/moeserve/default-model/${f##*/}" "/staging/models/${f##*/}"; \
    done \
 && chmod -R a+rX /staging/usr/share/moeserve /staging/models

# The Debian packages that own the shared libraries the binary links; the
# runtime stage installs exactly these (plus libnuma1), with their Depends.
# For rocm that includes libamdhip64-5, whose Depends bring what ldd cannot
# see: libamd-comgr2, which the HIP runtime dlopens to read the code objects.
# Fails on an unresolved library or one that no package owns.
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
ARG BACKEND

LABEL org.opencontainers.image.title="moeserve" \
      org.opencontainers.image.description="OpenAI-compatible server for GPT-OSS-style mixture-of-experts models (backend: ${BACKEND})" \
      org.opencontainers.image.licenses="MIT"

# libnuma1 is listed explicitly: the daemon's NUMA placement (--numa) uses it.
# `apt-get clean` also drops apt's package caches (/var/cache/apt/*.bin, ~80 MB).
COPY --from=build /runtime-packages /usr/share/moeserve/runtime-packages
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      $(cat /usr/share/moeserve/runtime-packages) libnuma1 \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log

RUN groupadd --system --gid 10001 moeserve \
 && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /var/lib/moeserve \
      --shell /usr/sbin/nologin moeserve

COPY --from=build /staging/ /
RUN if ldd /usr/local/bin/moeserve | grep -q 'not found'; then \
      ldd /usr/local/bin/moeserve >&2; exit 1; fi \
 && moeserve --version

# Listen on every interface of the container; the model at /models (the
# default model until a checkpoint is mounted there, read-only); the backend
# the image was built for (cpu is also the binary's default; the rocm image
# serves on the GPU without a flag).
ENV MOESERVE_HOST=0.0.0.0 \
    MOESERVE_PORT=8080 \
    MOESERVE_MODEL=/models \
    MOESERVE_BACKEND=${BACKEND}

USER 10001:10001
WORKDIR /var/lib/moeserve
EXPOSE 8080

# /health: 200 once the model is loaded, 503 (with the reason) while it loads
# or when loading failed; /live is 200 while the process serves HTTP. bash's
# /dev/tcp speaks the one HTTP/1.0 request (no curl in the image). The start
# period is long: a real checkpoint can take minutes to load.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10m --retries=3 \
  CMD ["/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${MOESERVE_PORT:-8080} && printf 'GET /health HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && read -r _ code _ <&3 && [ \"$code\" = 200 ]"]

# SIGTERM: stop accepting, let running requests finish (--shutdown-timeout,
# 30 s), exit 0. Give `docker stop` more than that: docker stop -t 40.
STOPSIGNAL SIGTERM
ENTRYPOINT ["moeserve"]
CMD ["serve"]
