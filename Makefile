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

.PHONY: all setup setup-aiperf setup-prom setup-redis setup-docker build run image test test-go test-pure test-fuzz test-notebook test-train-example test-python test-docker bench bench-classifier bench-gateway bench-cascade bench-policies-scenarios bench-fail-open bench-aiperf train clean help

all: build

help:
	@echo "make run    — set up, build and run the gateway with built-in simulated pools on 127.0.0.1:8080"
	@echo "make test   — set up and run the whole test suite (Go with -race, notebook, Python client tests, image and compose stack)"
	@echo "make test-pure — vet and test every package but the model's without cgo (CGO_ENABLED=0)"
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
	bin/triage --simulate $(ARGS)

test: setup test-go test-pure test-fuzz test-notebook test-train-example test-python test-docker

# promtool and prometheus (Debian package) for the deployment checks in deploy/;
# not part of `setup` because it needs root (apt-get).
setup-prom:
	@scripts/setup.sh prom

# redis-server (Debian package, Redis 7) for fleet mode's tests; root, like setup-prom.
setup-redis:
	@scripts/setup.sh redis

# build first: deploy/ starts the real gateway, built with these same flags, so
# its own `go build` is then only a link step.
test-go: setup-prom setup-redis build
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...

# Only the model (classifier/onnx) and the program that wires it in (cmd/triage) link ONNX
# Runtime and the tokenizer; every other package must build, vet and pass its tests with cgo
# off, so the gateway's logic can be worked on and tested without the model runtime.
# internal/archtest checks the transitive import graph and that RUNTIME_PKGS lists exactly
# the packages allowed to reach the runtime. deploy's tests still build and run the real
# gateway, with cgo, as a program of their own.
RUNTIME_PKGS := classifier/onnx cmd/triage
PURE_PKGS = $(filter-out $(addprefix github.com/triage-gw/triage/,$(RUNTIME_PKGS)),$(shell CGO_ENABLED=0 $(GO) list ./...))

test-pure: setup-prom setup-redis
	CGO_ENABLED=0 $(GO) build $$(CGO_ENABLED=0 $(GO) list -f '{{if .GoFiles}}{{.ImportPath}}{{end}}' $(PURE_PKGS))
	CGO_ENABLED=0 $(GO) vet $(PURE_PKGS)
	CGO_ENABLED=0 $(GO) test -count=1 -timeout 20m $(PURE_PKGS)

# Native Go fuzzing of everything a client or an operator feeds the gateway, FUZZTIME each, one
# target after the other (11 targets: about 4.5 minutes at 20s, builds included; internal/archtest
# checks that this list names every Fuzz function in the tree). Each target's
# seeds (and any crasher committed under <package>/testdata/fuzz/) also run in every plain
# `go test`. New coverage is minimized for at most 2s so the time goes to fuzzing. A crasher
# is written by Go to <package>/testdata/fuzz/<Target>/ and copied to out/fuzz-crashers/ for
# CI to keep; commit it to make it a regression case. `make test-fuzz FUZZTIME=5m` for longer.
FUZZTIME ?= 20s
FUZZ_TARGETS := \
	server:FuzzDecodeQueryProcess server:FuzzDecodeClassify server:FuzzDecodeChat server:FuzzDecodeCompletion \
	server:FuzzClientInputLeavesReplicasHealthy server:FuzzSSEFramer server:FuzzParseKeys server:FuzzRoutingKey \
	upstream:FuzzCheckHeader config:FuzzConfigYAML fleet:FuzzWireDecode

test-fuzz: setup
	@mkdir -p out/fuzz; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "== fuzz ./$$pkg $$fn for $(FUZZTIME)"; \
	  if ! $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./$$pkg/ >out/fuzz/$$fn.log 2>&1; then \
	    tail -40 out/fuzz/$$fn.log; mkdir -p out/fuzz-crashers/$$fn; \
	    cp -r $$pkg/testdata/fuzz/$$fn/. out/fuzz-crashers/$$fn/ 2>/dev/null; \
	    echo "FAIL $$fn: crasher in $$pkg/testdata/fuzz/$$fn/ (copied to out/fuzz-crashers/$$fn/)"; exit 1; \
	  fi; tail -1 out/fuzz/$$fn.log; \
	done

# Re-trains from scratch into a scratch folder and checks that the committed
# models/ is what the notebook produces (same head, same metrics).
test-notebook:
	rm -rf $(DEPS)/ci-models
	cd train && TRIAGE_EXPORT_DIR=$(DEPS)/ci-models $(VENV)/bin/jupyter nbconvert --to notebook --execute \
	  --ExecutePreprocessor.timeout=3600 --output-dir=$(DEPS)/ci-models --output classifier.executed.ipynb classifier.ipynb
	$(VENV)/bin/python scripts/compare_models.py models $(DEPS)/ci-models

# Retraining on an operator's own labelled JSONL: the data loader's tests, then
# the notebook on train/examples/operator-example.jsonl (400 rows derived from
# Dolly; 500 out-of-category rows for the band rule), then a check that the
# export is complete. About a minute.
test-train-example:
	cd train && $(VENV)/bin/python -m pytest -q -p no:cacheprovider test_dataset.py
	rm -rf $(DEPS)/ci-example
	cd train && TRIAGE_DATA=examples/operator-example.jsonl TRIAGE_OOD_MAX=500 TRIAGE_EXPORT_DIR=$(DEPS)/ci-example \
	  $(VENV)/bin/jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=1200 \
	  --output-dir=$(DEPS)/ci-example --output classifier.executed.ipynb classifier.ipynb
	$(VENV)/bin/python scripts/check_export.py $(DEPS)/ci-example

# aiperf (NVIDIA's benchmark client, ~1.2 GB of dependencies in its own venv) is needed only by
# tests/test_aiperf.py and make bench-aiperf, so it is not part of the setup make run needs.
setup-aiperf:
	@scripts/setup.sh aiperf

test-python: build setup-aiperf
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
	$(GO) test -run '^$$' -bench 'Classify|Static' -benchtime 3s -timeout 30m ./classifier/ ./classifier/onnx/

# The gateway scenarios (starts bin/triage itself) and the replica-policy sweep;
# results land in bench/results/gateway/ and bench/results/policies/ (see bench/README.md).
bench-gateway: build
	bin/triage-bench gateway --out bench/results/gateway $(ARGS)
	bin/triage-bench policies --seeds 1,2,3 --out bench/results/policies --plot $(ARGS)

# The replica-policy sweep in each scenario besides the default one: replicas that differ,
# a replica that slows down mid-run, one heavy user among light ones. Results in
# bench/results/policies-<scenario>/ (see bench/README.md). The degrading run is 30 s long so that
# its slow stretch (the middle half) outlasts the 1 s scrapes many times.
bench-policies-scenarios: build
	bin/triage-bench policies --scenario heterogeneous --seeds 1,2,3 --out bench/results/policies-heterogeneous --plot $(ARGS)
	bin/triage-bench policies --scenario degrading --duration 30s --out bench/results/policies-degrading --plot $(ARGS)
	bin/triage-bench policies --scenario tenants --out bench/results/policies-tenants --plot $(ARGS)

# The classifier cascade on vs off, on Dolly texts and on ~256-word-piece prompts (190
# words): seq-miss (1 client) and conc-miss (32 clients), each with the gateway's CPU per
# 1,000 requests. Results in bench/results/cascade/<on|off>-<words>/.
bench-cascade: build
	for mode in on off; do for words in 0 190; do \
	  bin/triage-bench gateway --scenarios seq-miss,conc-miss --config bench/configs/cascade-$$mode.yaml \
	    --text-words $$words --out bench/results/cascade/$$mode-$$words $(ARGS) || exit 1; \
	done; done

# The classifier's fail-open routing: 32, 8 and 1 clients, streaming chat with a new
# ~256-token prompt each, before fail-open (no budget, 429 on a full queue) and with each
# budget, cascade on and off. About 13 minutes. Results in bench/results/fail-open/<clients>/.
bench-fail-open: build
	bin/triage-bench gateway --scenarios fail-open --fail-open-clients 32 --fail-open-budgets 25ms,50ms,100ms,250ms \
	  --out bench/results/fail-open/32 $(ARGS)
	for n in 8 1; do \
	  bin/triage-bench gateway --scenarios fail-open --fail-open-clients $$n --fail-open-budgets 50ms,150ms \
	    --out bench/results/fail-open/$$n $(ARGS) || exit 1; \
	done

# The gateway's own cost as NVIDIA's aiperf measures it (README "Measure it yourself").
bench-aiperf: build setup-aiperf
	bench/aiperf/measure.sh

train: setup
	cd train && $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=3600 classifier.ipynb

clean:
	rm -rf bin
