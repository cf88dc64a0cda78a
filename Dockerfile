# termivar-coord in a container: a static binary (CGO off) on an empty
# base image, run as an unprivileged user, state in the /data volume.
# docs/operations.md explains every flag below; the packaging test
# (cmd/termivar-coord/packaging_test.go) checks that they exist.
#
#   docker build -t termivar-coord .
#   docker run -d --name termivar -p 7420:7420 -v termivar-data:/data termivar-coord
#   docker cp termivar:/data/admin.key ./admin.key

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/termivar-coord ./cmd/termivar-coord
# The data dir must be 0700 and owned by the user that serves it (the
# node refuses a data dir that group or others may write).
RUN mkdir -p /out/data && chmod 0700 /out/data

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/termivar-coord /termivar-coord
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
VOLUME ["/data"]
# 7420: the API (clients, workers, other members forwarding to the leader);
# 7421: raft (other members only; mutual TLS from the cluster secret).
EXPOSE 7420 7421
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/termivar-coord", "health", "--url", "http://127.0.0.1:7420", "--timeout", "4s"]
ENTRYPOINT ["/termivar-coord"]
# A single node. For a cluster member, override the command: a concrete
# --raft-addr (the container's hostname on its network, e.g. n1:7421),
# --node-id, --advertise-url and --peers or --join (docs/operations.md).
CMD ["serve", "--data-dir", "/data", "--api-addr", "0.0.0.0:7420", "--raft-addr", "127.0.0.1:7421"]
