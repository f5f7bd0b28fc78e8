# Stand-in for the prom/prometheus image: Debian's prometheus package on the
# same base as the Triage image, run the way the public image runs it (user
# nobody, data in /prometheus, the server as entrypoint). Debian's release is
# older than the compose file's pinned image, so the stand-in has a name of
# its own (triage-standin/prometheus:<version>); docker/compose.yaml takes it
# from PROMETHEUS_IMAGE. Built by scripts/standin-images.sh.
ARG BASE
FROM ${BASE}
ARG DEB_VERSION
RUN apt-get update \
 && apt-get install -y --no-install-recommends "prometheus=${DEB_VERSION}" \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /prometheus \
 && chown nobody:nogroup /prometheus
USER nobody
WORKDIR /prometheus
EXPOSE 9090
VOLUME ["/prometheus"]
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
