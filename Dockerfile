# syntax=docker/dockerfile:1
#
# One image for all of Pulse: the four services and pulsectl in /usr/local/bin, the CQL
# migrations in /migrations. It has no entrypoint of its own: whoever runs it names the
# binary (the Helm chart in deploy/helm/pulse does, per container).
#
#   docker build -t pulse:dev .
#   docker run --rm pulse:dev /usr/local/bin/ingest -help
#
# Static binaries (CGO_ENABLED=0) on distroless's static image: no shell, no package
# manager, a non-root user (65532) by default.

ARG GO_VERSION=1.26
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath

# The module files first, so the download layer is reused while only code changes.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download

COPY cmd/ cmd/
COPY internal/ internal/
COPY pkg/ pkg/
COPY services/ services/
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    mkdir -p /out && \
    go build -ldflags='-s -w' -o /out/ \
        ./services/ingest ./services/query ./services/aggregator ./services/history ./services/notifier ./cmd/pulsectl

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
COPY migrations/ /migrations/
USER 65532:65532
CMD ["/usr/local/bin/pulsectl"]
