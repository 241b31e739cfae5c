# The leasebridge image: a static binary, CA certificates and a non-root
# user, nothing else. scripts/image builds the same image without a Docker
# daemon (README.md, Container image).
#
#   docker build -t leasebridge:dev .
#   docker build --build-arg TARGETARCH=arm64 -t leasebridge:dev-arm64 .
FROM golang:1.26-bookworm AS build
ARG TARGETARCH=amd64
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux GOARCH=${TARGETARCH} \
    go build -trimpath -buildvcs=auto -ldflags='-s -w -buildid=' -o /out/leasebridge ./cmd/leasebridge
RUN mkdir -p /rootfs/etc/ssl/certs /rootfs/usr/local/bin /rootfs/home/nonroot /rootfs/tmp \
    && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ \
    && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /rootfs/etc/passwd \
    && printf 'root:x:0:\nnonroot:x:65532:\n' > /rootfs/etc/group \
    && chown 65532:65532 /rootfs/home/nonroot && chmod 1777 /rootfs/tmp \
    && cp /out/leasebridge /rootfs/usr/local/bin/leasebridge

FROM scratch
COPY --from=build /rootfs/ /
ENV PATH=/usr/local/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/leasebridge"]
CMD ["--help"]
