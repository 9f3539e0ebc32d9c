# syntax=docker/dockerfile:1
# Build: a static binary (pure-Go SQLite, no cgo).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/gateway ./cmd/gateway \
 && mkdir -p /out/data

# Run: distroless static, non-root. The embedded SQLite ledger lives in
# /app/data (mount a volume there); production uses PostgreSQL and Redis.
FROM gcr.io/distroless/static-debian12:nonroot
WORKDIR /app
COPY --from=build /out/gateway /app/gateway
COPY --from=build --chown=65532:65532 /out/data /app/data
COPY config.yaml /app/config.yaml
# Numeric (distroless's nonroot): a kubelet enforcing runAsNonRoot can only
# verify a numeric user, and refuses to start a pod on a named one unless
# the pod sets runAsUser itself.
USER 65532:65532
# config.yaml keeps the admin listener on loopback; in a container, probes
# and Prometheus come from outside it. /admin/* stays off without a token.
ENV HOOKSTAMP_ADMIN__LISTEN=:9090
EXPOSE 8080 9090
ENTRYPOINT ["/app/gateway"]
CMD ["serve", "-config", "/app/config.yaml"]
