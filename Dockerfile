# mcpgate container image.
#
# This file needs no registry: the Go binary is built on the host (`make
# image`), and the slim target starts FROM scratch. The full target adds node,
# npm and python3, so that sandbox-mode stdio servers can run inside the
# gateway's own container; its base is made locally by deploy/base/build.sh
# (mmdebstrap + docker import) or, with a registry, from debian:bookworm-slim.
#
#   make image         # mcpgate:latest       (slim, FROM scratch)
#   make image-full    # mcpgate:full         (Debian, node, npm, python3)
#
# By hand, after staging the build context into bin/image/:
#   deploy/image-context.sh bin/image/mcpgate   # binary built with -tags timetzdata
#   DOCKER_BUILDKIT=0 docker build --target slim -t mcpgate .
#
# The legacy builder builds every stage up to --target in order, so slim
# comes first and never needs the full target's base.

ARG FULL_BASE=mcpgate-base:bookworm

FROM scratch AS slim
ARG VERSION=dev
# rootfs/ holds the binary, CA certificates, passwd/group naming uid 65532,
# and a sticky /tmp; the binary embeds the time zone database.
COPY bin/image/rootfs/ /
# A named volume mounted on /data starts as a copy of this directory, owner
# included, so the non-root gateway can write to it.
COPY --chown=65532:65532 bin/image/data/ /data/
ENV PATH=/usr/local/bin \
    MCPGATE_DATA_DIR=/data \
    MCPGATE_LISTEN=:8080
LABEL org.opencontainers.image.title="mcpgate" \
      org.opencontainers.image.description="Team-shared gateway for the Model Context Protocol" \
      org.opencontainers.image.version="${VERSION}"
USER 65532:65532
WORKDIR /data
VOLUME /data
EXPOSE 8080
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 CMD ["mcpgate", "healthcheck"]
ENTRYPOINT ["mcpgate", "serve"]

FROM ${FULL_BASE} AS full
ARG VERSION=dev
COPY bin/image/rootfs/usr/local/bin/ /usr/local/bin/
COPY --chown=65532:65532 bin/image/data/ /data/
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    MCPGATE_DATA_DIR=/data \
    MCPGATE_LISTEN=:8080
LABEL org.opencontainers.image.title="mcpgate" \
      org.opencontainers.image.description="Team-shared gateway for the Model Context Protocol, with node, npm and python3 for stdio servers" \
      org.opencontainers.image.version="${VERSION}-full"
USER 65532:65532
WORKDIR /data
VOLUME /data
EXPOSE 8080
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 CMD ["mcpgate", "healthcheck"]
ENTRYPOINT ["mcpgate", "serve"]
