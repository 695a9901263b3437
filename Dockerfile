# The edgewatch image: one Python package, two entry points (agent, controller).
# SBOM (CycloneDX, by cyclonedx-py from the image's Python packages): make sbom (edgewatch_lab.testing.sbom).
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir . && rm -rf /src
USER 65532:65532
ENTRYPOINT ["edgewatch"]
