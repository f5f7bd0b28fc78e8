# Triage — one entry point for setup, build, run, test and benchmarks.
# Every target that needs artifacts depends on `setup`, which is idempotent
# and cached in .deps/ (see scripts/setup.sh).

SHELL := /bin/bash
ROOT  := $(abspath .)
DEPS  := $(ROOT)/.deps
VENV  := $(DEPS)/venv
# daulet/tokenizers links libtokenizers.a; onnxruntime_go dlopens the .so by path.
export CGO_ENABLED := 1
export CGO_LDFLAGS := -L$(DEPS)/tokenizers
GO    ?= go
ARGS  ?=

.PHONY: all setup setup-prom setup-docker build run image test test-go test-notebook test-python test-docker bench bench-classifier bench-gateway train clean help

all: build

help:
	@echo "make run    — set up, build and run the gateway with built-in simulated pools on 127.0.0.1:8080"
	@echo "make test   — set up and run the whole test suite (Go with -race, notebook, Python client tests, image and compose stack)"
	@echo "make image  — build the Docker image triage:dev from docker/Dockerfile (installs and starts the engine; root)"
	@echo "make setup  — install ONNX Runtime, libtokenizers, encoders and the Python venv into .deps/"
	@echo "make build  — build bin/triage, bin/mockllm, bin/triage-bench"
	@echo "make bench  — classifier and gateway benchmarks (numbers quoted in README.md)"
	@echo "make train  — re-run the notebook and overwrite models/ (commit the result)"

setup:
	@scripts/setup.sh

build: setup
	$(GO) build -o bin/ ./cmd/...

run: build
	bin/triage $(ARGS)

test: setup test-go test-notebook test-python test-docker

# promtool and prometheus (Debian package) for the deployment checks in deploy/;
# not part of `setup` because it needs root (apt-get).
setup-prom:
	@scripts/setup.sh prom

# build first: deploy/ starts the real gateway, built with these same flags, so
# its own `go build` is then only a link step.
test-go: setup-prom build
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...

# Re-trains from scratch into a scratch folder and checks that the committed
# models/ is what the notebook produces (same head, same metrics).
test-notebook:
	rm -rf $(DEPS)/ci-models
	cd train && TRIAGE_EXPORT_DIR=$(DEPS)/ci-models $(VENV)/bin/jupyter nbconvert --to notebook --execute \
	  --ExecutePreprocessor.timeout=3600 --output-dir=$(DEPS)/ci-models --output classifier.executed.ipynb classifier.ipynb
	$(VENV)/bin/python scripts/compare_models.py models $(DEPS)/ci-models

test-python: build
	$(VENV)/bin/python -m pytest -q tests/ --ignore=tests/docker

# Docker engine (Debian's docker.io, docker-compose, debootstrap) installed and
# running; needs root (apt-get, dockerd).
setup-docker:
	@scripts/setup.sh docker
	@scripts/dockerd.sh

# The image triage:dev from docker/Dockerfile. Base images that cannot be
# pulled are built locally first (scripts/standin-images.sh); the ONNX Runtime
# and encoders already verified in .deps/ are handed to the build
# (scripts/build-image.sh). Layers stay in the engine's cache between runs.
image: setup-docker
	@scripts/standin-images.sh --dockerfile
	@scripts/build-image.sh

# The image and the compose stack run for real: image contents and the compose
# stack with Prometheus (deploy/, -tags docker), the container with the openai
# client (tests/docker/).
test-docker: setup image
	@scripts/standin-images.sh --compose
	$(GO) test -count=1 -tags docker -run '^(TestImage|TestComposeUp)$$' -timeout 15m ./deploy/
	$(VENV)/bin/python -m pytest -q tests/docker

bench: bench-classifier bench-gateway

bench-classifier: setup
	$(GO) test -run '^$$' -bench Classify -benchtime 3s -timeout 30m ./classifier/

# The gateway scenarios (starts bin/triage itself) and the replica-policy sweep;
# results land in bench/results/ (see bench/README.md).
bench-gateway: build
	bin/triage-bench gateway --out bench/results $(ARGS)
	bin/triage-bench policies --out bench/results --plot $(ARGS)

train: setup
	cd train && $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=3600 classifier.ipynb

clean:
	rm -rf bin
