# The release image: the binaries `make release` cross-compiled (.build/linux-<arch>, static,
# CGO_ENABLED=0), nothing compiled here, and the root file system it staged in .build/rootfs (the
# CA certificates for rediss:// targets, passwd and group naming the nonroot user, /tmp, LICENSE).
# `make release` builds it for linux/amd64 and linux/arm64 with buildah into
# dist/stall_exporter-<version>.oci.tar; after `make release`, `docker buildx build --platform
# linux/amd64,linux/arm64 .` builds the same from this directory.
FROM scratch
ARG TARGETARCH
ARG VERSION
ARG REVISION
ARG CREATED
LABEL org.opencontainers.image.title="stall_exporter" \
      org.opencontainers.image.description="Prometheus exporter for the early warning signs of latency stalls on message-broker and cache hosts" \
      org.opencontainers.image.source="https://github.com/stall-exporter/stall_exporter" \
      org.opencontainers.image.url="https://github.com/stall-exporter/stall_exporter" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY .build/rootfs/ /
COPY .build/linux-${TARGETARCH}/stall_exporter /bin/stall_exporter
# 65532 is the "nonroot" user: everything but /dev/kmsg works unprivileged. Reading /dev/kmsg
# under kernel.dmesg_restrict=1 needs CAP_SYSLOG, which only uid 0 can hold in a container (see
# deploy/kubernetes/daemonset.yaml); without it the kmsg collector reports
# stall_kernel_log_reader_up 0 and the rest runs.
USER 65532:65532
EXPOSE 29110
ENTRYPOINT ["/bin/stall_exporter"]
