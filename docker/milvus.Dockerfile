# Milvus standalone for the compose `milvus` profile, built from PyPI's `milvus` package on the search
# image's base, so no image registry is needed (docs/deploy.md, "Milvus"). The package carries the
# Milvus 2.3.5 standalone binary with an embedded etcd and local storage (no MinIO, no Pulsar), and its
# launcher `milvus-server` writes the configuration and starts it; the tests start the same server
# (tests/servers.py, milvus_standalone).
#   docker build -t infonce-search-milvus -f docker/milvus.Dockerfile --build-arg BASE_IMAGE=... docker/
#   MILVUS_IMAGE=infonce-search-milvus COMPOSE_PROFILES=milvus SEARCH_INDEX_BACKEND=milvus \
#       SEARCH_MILVUS_URI=http://milvus:19530 docker compose up
ARG BASE_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# A pip.conf mounted only while RUN steps run (the smoke test mounts the host's, as for the search
# image's builder); a build argument, so no image stores it.
ARG PIP_CONFIG_FILE
# The version the tests run against (pyproject's test extra); the package has no dependencies.
ARG MILVUS_VERSION=2.3.5
RUN python -m venv /opt/milvus \
    && /opt/milvus/bin/pip install "milvus==${MILVUS_VERSION}"

# ---------------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE}

LABEL org.opencontainers.image.title="infonce-search-milvus" \
      org.opencontainers.image.description="Milvus standalone from the milvus PyPI package (embedded etcd, local storage)"

# A fixed uid, so USER can be numeric (Kubernetes' runAsNonRoot).
RUN groupadd --system --gid 10003 milvus \
    && useradd --system --uid 10003 --gid milvus --home-dir /var/lib/milvus --shell /usr/sbin/nologin milvus \
    && mkdir -p /var/lib/milvus \
    && chown milvus:milvus /var/lib/milvus
COPY --from=builder /opt/milvus /opt/milvus
# The entrypoint: the package's launcher, but exiting when the server dies (so `restart: unless-stopped`
# restarts a crashed Milvus) and stopping it on SIGTERM too (milvus_launch.py says why).
COPY milvus_launch.py /opt/milvus/milvus_launch.py
ENV PATH=/opt/milvus/bin:$PATH

# Everything lives under --data: the binary unpacked from the package (bin/, ~200 MB, at the first
# start), the generated milvus.yaml (configs/), logs (logs/: the server's own stdout and stderr go
# there, not to the container's), embedded etcd, the rocksmq log and the segments (data/).
WORKDIR /var/lib/milvus
VOLUME ["/var/lib/milvus"]
USER 10003:10003
# 19530: the gRPC proxy pymilvus talks to; 9091: /healthz and metrics.
EXPOSE 19530 9091
# milvus_launch.py stops Milvus on SIGTERM as on SIGINT (the package's launcher alone has no SIGTERM handler).
STOPSIGNAL SIGTERM
# The same check the launcher waits on before it prints its banner; Python is in every base image.
HEALTHCHECK --interval=10s --timeout=5s --start-period=180s --retries=3 \
    CMD ["python3", "-c", "import sys, urllib.request; sys.exit(b'OK' not in urllib.request.urlopen('http://127.0.0.1:9091/healthz', timeout=4).read())"]
CMD ["/opt/milvus/bin/python", "/opt/milvus/milvus_launch.py", "--data", "/var/lib/milvus", "--proxy-port", "19530"]
