# Stand-in for golang:<version>-bookworm, from the host's Go tree (Go's
# installation is relocatable) on the stand-in build base, with the public
# image's environment. Built by scripts/standin-images.sh, which checks
# `go version` against the tag.
ARG BASE
FROM ${BASE}
ARG GO_VERSION
ENV GOLANG_VERSION=${GO_VERSION} \
    GOTOOLCHAIN=local \
    GOPATH=/go \
    PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY go/ /usr/local/go/
RUN mkdir -p /go/src /go/bin && chmod -R 1777 /go && go version
WORKDIR /go
