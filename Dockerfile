# tensorops-server image, CPU target. Minimal until the deployment issue, which adds the `cuda`
# target, a health check and a tested build; this file is not yet built by any test.
#
#   podman build --target cpu -t tensorops:cpu .
#   podman run --rm -p 50051:50051 tensorops:cpu --host=0.0.0.0

FROM debian:bookworm-slim AS build
# Dependencies first, through the same script developers use, so the layer caches across edits.
COPY scripts/install-deps /src/scripts/install-deps
RUN /src/scripts/install-deps
COPY . /src
RUN cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTENSOROPS_ENABLE_CUDA=OFF \
      -DTENSOROPS_BUILD_TESTS=OFF -DTENSOROPS_BUILD_BENCH=OFF \
 && cmake --build /build --target tensorops-server tensorops-cli

FROM debian:bookworm-slim AS cpu
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 libspdlog1.10 libfmt9 libtbb12 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libcivetweb1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 tensorops
COPY --from=build /build/server/tensorops-server /build/client/cpp/tensorops-cli /usr/local/bin/
USER tensorops
EXPOSE 50051 9464
ENTRYPOINT ["/usr/local/bin/tensorops-server"]
CMD ["--host=0.0.0.0", "--port=50051", "--metrics_port=9464"]
