# tensorops-server images. Two targets, built by the same two stages (deploy/image/build, then
# deploy/image/runtime) on different bases:
#
#   cpu    build and run on Debian 12 (debian:bookworm-slim)
#   cuda   build on NVIDIA's CUDA 13 devel image, run on its runtime image (Ubuntu 24.04)
#
#   podman build --format docker --target cpu -t tensorops:cpu .
#   podman build --format docker --target cuda --build-arg CUDA_ARCHITECTURES=90 -t tensorops:cuda .
#   podman run --rm -p 50051:50051 -p 9464:9464 tensorops:cpu
#
# deploy/README.md has the details; deploy/container-test builds and runs the cpu target. The
# final stages hold the two binaries and only the shared libraries they load (computed from
# `ldd` in the build stage), run as the unprivileged user `tensorops` (uid 10001), and stop
# gracefully on SIGTERM: the server is PID 1 and drains for --shutdown_grace_s. HEALTHCHECK is
# kept by the docker image format (podman's default OCI format drops it: --format docker).

ARG DEBIAN_IMAGE=docker.io/library/debian:bookworm-slim
ARG CUDA_VERSION=13.0.0
ARG CUDA_OS=ubuntu24.04

# ------------------------------------------------------------------------------------------------
FROM ${DEBIAN_IMAGE} AS cpu-build
# Dependencies first, through the same script developers use, so the layer caches across edits.
COPY scripts/install-deps /src/scripts/install-deps
RUN INSTALL_DEPS_PROFILE=build /src/scripts/install-deps && rm -rf /var/lib/apt/lists/*
COPY . /src
ARG BUILD_JOBS
RUN BUILD_JOBS=${BUILD_JOBS} /src/deploy/image/build -DTENSOROPS_ENABLE_CUDA=OFF

FROM docker.io/nvidia/cuda:${CUDA_VERSION}-devel-${CUDA_OS} AS cuda-build
COPY scripts/install-deps /src/scripts/install-deps
RUN INSTALL_DEPS_PROFILE=build /src/scripts/install-deps && rm -rf /var/lib/apt/lists/*
COPY . /src
ARG BUILD_JOBS
# GPU architectures to compile for, as CMAKE_CUDA_ARCHITECTURES: 90 is Hopper (H100/H200);
# "80;90" for Ampere and Hopper.
ARG CUDA_ARCHITECTURES=90
RUN BUILD_JOBS=${BUILD_JOBS} /src/deploy/image/build -DTENSOROPS_ENABLE_CUDA=ON \
      "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}"

# ------------------------------------------------------------------------------------------------
FROM ${DEBIAN_IMAGE} AS cpu
COPY deploy/image/runtime /tmp/runtime
COPY --from=cpu-build /opt/tensorops/runtime-packages /tmp/runtime-packages
RUN /tmp/runtime /tmp/runtime-packages && rm /tmp/runtime /tmp/runtime-packages
COPY --from=cpu-build /opt/tensorops/bin/ /usr/local/bin/
COPY deploy/tensorops.flags /etc/tensorops/tensorops.flags
USER 10001:10001
# gRPC (TensorOps, health, reflection) and Prometheus metrics.
EXPOSE 50051 9464
# The CLI's `info` is a ServerInfo call: it succeeds only when the server accepts calls. (With
# --auth_token_file set, add --token_file to it, or probe the open health service from outside.)
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/tensorops-cli", "info", "--target=127.0.0.1:50051", "--timeout=4s"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/tensorops-server"]
CMD ["--flagfile=/etc/tensorops/tensorops.flags"]

FROM docker.io/nvidia/cuda:${CUDA_VERSION}-runtime-${CUDA_OS} AS cuda
COPY deploy/image/runtime /tmp/runtime
COPY --from=cuda-build /opt/tensorops/runtime-packages /tmp/runtime-packages
RUN /tmp/runtime /tmp/runtime-packages && rm /tmp/runtime /tmp/runtime-packages
COPY --from=cuda-build /opt/tensorops/bin/ /usr/local/bin/
COPY deploy/tensorops.flags /etc/tensorops/tensorops.flags
# The NVIDIA container runtime mounts the driver's libraries for these.
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 10001:10001
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/tensorops-cli", "info", "--target=127.0.0.1:50051", "--timeout=4s"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/tensorops-server"]
CMD ["--flagfile=/etc/tensorops/tensorops.flags"]
