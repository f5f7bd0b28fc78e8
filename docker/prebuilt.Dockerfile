# The prebuilt artifacts docker/Dockerfile's build stage can start from
# (--build-arg PREBUILT=<this image>): `make image` (scripts/build-image.sh)
# builds it from a context holding the host's verified .deps/ files, laid out
# like .deps/ (onnxruntime/, encoders/<name>/, tokenizers/). Nothing here is
# trusted blindly: the build stage runs setup.sh over it, which checks every
# download's sha256 pin and uses libtokenizers.a only when its stamp says it
# was built with its paths mapped (else it builds its own).
FROM scratch
COPY . /prebuilt/
