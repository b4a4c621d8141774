# A small image of the baton binary: a static build on a distroless base.
#
#   docker build -t baton .
#   docker run --rm -v baton:/data baton init --new-chain
#   docker run -d --name baton -v baton:/data -p 7420:7420 -p 127.0.0.1:9420:9420 baton \
#       run --metrics-addr 0.0.0.0:9420
#
# The data dir is /data/baton (BATON_DATA) on the /data volume, which the image's
# nonroot user owns: the mark (/data/baton.mark, outside the data dir, so that a
# restored data dir is recognised) sits beside it. Keep the volume: it holds the keys.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# With .git in the build context, go stamps the VCS revision `baton version` prints;
# without it, pass one: docker build --build-arg REVISION=$(git rev-parse HEAD) .
ARG REVISION=
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=auto -ldflags="-s -w -X main.revision=${REVISION}" -o /out/baton ./cmd/baton \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/baton /usr/local/bin/baton
# /data belongs to the image's nonroot user (65532), so a new volume does too; baton
# creates the data dir and the mark inside it.
COPY --from=build --chown=65532:65532 /out/data /data
ENV BATON_DATA=/data/baton BATON_LOG_FORMAT=json BATON_LISTEN=/ip4/0.0.0.0/tcp/7420
VOLUME /data
EXPOSE 7420 9420
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/baton"]
CMD ["run"]
