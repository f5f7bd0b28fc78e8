// Package deploy holds the deployment artifacts' checks; it has no code of its own.
//
// The artifacts live in docker/ (Dockerfile, compose stack, Prometheus config, Grafana
// provisioning and dashboard) and deploy/k8s/ (Kubernetes manifest). Two kinds of tests
// check them.
//
// Without a container engine (plain `go test ./...`), with the real programs:
//
//   - promtool check config accepts docker/prometheus/prometheus.yml;
//   - the Grafana dashboard parses, every PromQL expression in it names only metrics that a
//     running gateway (bin/triage, built from this tree) or mockllm really exports, and the
//     panels the deployment issue asks for are there;
//   - a real Prometheus server, started with docker/prometheus/prometheus.yml retargeted at
//     127.0.0.1 ports, scrapes a running gateway and mockllm, has the key series, and
//     evaluates every dashboard expression without error;
//   - the Kubernetes manifest parses; its ConfigMap's triage.yaml loads with the gateway's
//     own strict config loader (unknown keys fail) under the Deployment's environment;
//     every TRIAGE_* variable in the Deployment, the Dockerfile and the compose file exists;
//     probes, ports, mounts and selectors agree with each other;
//   - the compose stack is consistent: the gateway config's replicas are the mockllm
//     services (fast preset in the fast pool, slow in the slow one), Prometheus scrapes
//     exactly those and the gateway, Grafana's datasource is the one the dashboard uses;
//     the Dockerfile's bases are pinned, and the two .dockerignore files agree.
//
// With the Docker engine and the image (build tag docker; `make test-docker`, part of
// `make test`, installs the engine, builds the image and runs them):
//
//   - TestImage: the image's configuration (uid 10001, entrypoint, HEALTHCHECK, exactly the
//     expected environment), its size against the 250 MB goal, its history, and every file
//     of every layer of `docker save`: no version control or credential files, no build-stage
//     toolchains, no trace of the build machine (checkout and .deps paths, cargo and rustup
//     homes, Go module cache, its locally added CA certificates, credential-like environment
//     values), and the ONNX Runtime and encoder files are the ones setup.sh pins;
//   - TestComposeUp: docker/compose.yaml under Debian's docker-compose (v1), every service
//     but Grafana (whose image cannot be pulled here; notRunHere says so), ports on
//     127.0.0.1; traffic through the gateway, Prometheus scraping every target and counting
//     the requests, the gateway's HEALTHCHECK, and a graceful stop (exit 0).
//
// The container behaviour seen by a client (openai client, read-only root, SIGTERM drain)
// is tested in tests/docker/ with pytest.
//
// promtool and prometheus come from the Debian package installed by `scripts/setup.sh prom`,
// docker and docker-compose from `scripts/setup.sh docker` (both run by `make test`); the
// tests fail, not skip, without them.
//
// # Concurrency and lifecycle
//
// The binaries are built once per test run into a temporary directory (TestMain removes
// it). The process-based tests start their own gateway, mockllm and Prometheus on
// 127.0.0.1 (ports chosen by the kernel where the program reports them), and stop them with
// SIGTERM, then SIGKILL, in t.Cleanup. TestComposeUp runs its stack under a project name of
// its own and removes it (containers, network, volumes) with `docker-compose down -v` in
// t.Cleanup.
package deploy
