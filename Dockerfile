# Multi-stage build: a static (CGO_ENABLED=0) binary in a distroless image,
# running as a non-root user. Build with: docker build -t stall_exporter .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make build GO=go

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/stall_exporter /bin/stall_exporter
# 65532 is distroless' "nonroot" user: everything but /dev/kmsg works
# unprivileged. Reading /dev/kmsg under kernel.dmesg_restrict=1 needs
# CAP_SYSLOG, which only uid 0 can hold in a container (see
# deploy/kubernetes/daemonset.yaml); without it the kmsg collector reports
# stall_kernel_log_reader_up 0 and the rest runs.
USER 65532:65532
EXPOSE 29110
ENTRYPOINT ["/bin/stall_exporter"]
