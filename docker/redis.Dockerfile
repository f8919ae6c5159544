# Redis for the compose `redis` profile, built from the Debian archive on the search image's base, for
# hosts that reach no image registry (docs/deploy.md, "Without a registry"). Elsewhere the profile's
# default, the official redis:7.2-alpine, does the same job.
#   docker build -t infonce-search-redis -f docker/redis.Dockerfile --build-arg BASE_IMAGE=... docker/
#   REDIS_IMAGE=infonce-search-redis COMPOSE_PROFILES=redis SEARCH_QUEUE_URL=redis://redis:6379/0 docker compose up
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# A fixed uid, so USER can be numeric (Kubernetes' runAsNonRoot); the package's postinst keeps this user.
# hadolint ignore=DL3008
RUN groupadd --system --gid 10002 redis \
    && useradd --system --uid 10002 --gid redis --home-dir /var/lib/redis --shell /usr/sbin/nologin redis \
    && apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data \
    && chown redis:redis /data

# The compose service runs `redis-server --appendonly yes`: the append-only file goes to the working
# directory, the `redis` volume. Like the official image: Redis's built-in default listens on every
# interface of the container network, and protected mode is turned off (there is no password), so
# publish no port and keep that network private.
WORKDIR /data
VOLUME ["/data"]
USER 10002:10002
EXPOSE 6379
ENTRYPOINT ["/bin/sh", "-c", "if [ \"$1\" = redis-server ]; then shift; exec redis-server --protected-mode no \"$@\"; fi; exec \"$@\"", "--"]
CMD ["redis-server"]
