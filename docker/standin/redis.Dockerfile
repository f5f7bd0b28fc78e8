# Stand-in for the redis image: Debian's redis-server (and redis-cli, for the
# compose healthcheck) on the same base as the Triage image, run the way the
# public image runs it (user redis, data in /data, the server as entrypoint).
# Debian's build is not the public image's, so the stand-in has a name of its
# own (triage-standin/redis:<version>); docker/compose.yaml takes it from
# REDIS_IMAGE. Built by scripts/standin-images.sh.
ARG BASE
FROM ${BASE}
ARG DEB_VERSION
RUN apt-get update \
 && apt-get install -y --no-install-recommends "redis-server=${DEB_VERSION}" "redis-tools=${DEB_VERSION}" \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data \
 && chown redis:redis /data
USER redis
WORKDIR /data
EXPOSE 6379
VOLUME ["/data"]
ENTRYPOINT ["/usr/bin/redis-server"]
# The package's /etc/redis/redis.conf binds 127.0.0.1 and daemonizes; the public image
# starts with no config file, which is what this does.
CMD ["--bind", "0.0.0.0", "--protected-mode", "no"]
