# The edgewatch image: one Python package (agent, controller, pool-coordinator), and etcd for the pool
# coordinator pods the controller runs for 'auto' pools (edgewatch pool-coordinator finds it on PATH).
# Built for both platforms as one multi-arch image (nothing below is architecture-specific: the base
# image is multi-arch, pip picks each platform's wheels):
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/edgewatch/edgewatch:0.1.0 .
# Offline, the lab builds the same image for both platforms: make image (edgewatch_lab.testing.images).
# SBOM (CycloneDX, by cyclonedx-py from the image's Python packages): make sbom (edgewatch_lab.testing.sbom).
FROM quay.io/coreos/etcd:v3.6.16 AS etcd

FROM python:3.11-slim
COPY --from=etcd /usr/local/bin/etcd /usr/local/bin/etcd
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir . && rm -rf /src
USER 65532:65532
ENTRYPOINT ["edgewatch"]
