// Package deploy holds the deployment artifacts' checks; it has no code of its own.
//
// The artifacts live in docker/ (Dockerfile, compose stack, Prometheus config, Grafana
// provisioning and dashboard) and deploy/k8s/ (Kubernetes manifest). None of them can be
// exercised here the way users run them: CI has no Docker engine and no cluster. The tests
// of this package check instead, with the real programs:
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
//     exactly those and the gateway, Grafana's datasource is the one the dashboard uses.
//
// promtool and prometheus come from the Debian package installed by `scripts/setup.sh prom`
// (run by `make test`); the tests fail, not skip, without them.
//
// # Concurrency and lifecycle
//
// The binaries are built once per test run into a temporary directory (TestMain removes
// it). The process-based tests start their own gateway, mockllm and Prometheus on
// 127.0.0.1 (ports chosen by the kernel where the program reports them), and stop them with
// SIGTERM, then SIGKILL, in t.Cleanup.
package deploy
