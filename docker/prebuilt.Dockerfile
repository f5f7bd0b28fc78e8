# The prebuilt artifacts docker/Dockerfile's build stage can start from
# (--build-arg PREBUILT=<this image>): `make image` (scripts/build-image.sh)
# builds it from a context holding the host's verified .deps/ files, laid out
# like .deps/ (onnxruntime/, encoders/<name>/). Nothing here is trusted: the
# build stage runs setup.sh over it, which checks every file's sha256 pin.
FROM scratch
COPY . /prebuilt/
