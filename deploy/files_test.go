package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/triage-gw/triage/config"
	"github.com/triage-gw/triage/upstream"
)

// The artifacts, from the repository root.
const (
	dockerfilePath     = "docker/Dockerfile"
	composePath        = "docker/compose.yaml"
	composeConfigPath  = "docker/triage.compose.yaml"
	prometheusPath     = "docker/prometheus/prometheus.yml"
	dashboardPath      = "docker/grafana/dashboards/triage.json"
	grafanaDatasources = "docker/grafana/provisioning/datasources/prometheus.yaml"
	grafanaProviders   = "docker/grafana/provisioning/dashboards/triage.yaml"
	k8sPath            = "deploy/k8s/triage.yaml"
)

// ---- Prometheus config ------------------------------------------------------------------

func promtoolCheck(t *testing.T, file string) {
	t.Helper()
	promtool := tool(t, "promtool")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool, "check", "config", file).CombinedOutput()
	require.NoError(t, err, "promtool check config %s:\n%s", file, out)
	require.Contains(t, string(out), "SUCCESS", "promtool check config %s:\n%s", file, out)
}

func TestPrometheusConfigPassesPromtool(t *testing.T) {
	promtoolCheck(t, path(prometheusPath))
}

// promConfig is the part of a Prometheus config the checks read and rewrite; everything
// else travels through Rest untouched.
type promConfig struct {
	Global        map[string]any `yaml:"global"`
	ScrapeConfigs []scrapeConfig `yaml:"scrape_configs"`
	Rest          map[string]any `yaml:",inline"`
}

type scrapeConfig struct {
	JobName       string         `yaml:"job_name"`
	MetricsPath   string         `yaml:"metrics_path,omitempty"`
	StaticConfigs []staticConfig `yaml:"static_configs"`
	Rest          map[string]any `yaml:",inline"`
}

type staticConfig struct {
	Targets []string          `yaml:"targets"`
	Labels  map[string]string `yaml:"labels,omitempty"`
}

func readPromConfig(t *testing.T) promConfig {
	t.Helper()
	var pc promConfig
	readYAML(t, prometheusPath, &pc)
	return pc
}

func (pc promConfig) job(t *testing.T, name string) scrapeConfig {
	t.Helper()
	for _, sc := range pc.ScrapeConfigs {
		if sc.JobName == name {
			return sc
		}
	}
	t.Fatalf("%s: no scrape job %q", prometheusPath, name)
	return scrapeConfig{}
}

// ---- Grafana ----------------------------------------------------------------------------

type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	Targets    []target       `json:"targets"`
	Panels     []panel        `json:"panels"` // collapsed rows
}

type target struct {
	RefID      string         `json:"refId"`
	Expr       string         `json:"expr"`
	Datasource *datasourceRef `json:"datasource"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// query is one PromQL expression of the dashboard and where it is.
type query struct {
	where string // panel title / refId
	expr  string
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(path(dashboardPath))
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(raw))
	var d dashboard
	require.NoError(t, dec.Decode(&d), "%s is not valid JSON", dashboardPath)
	_, err = dec.Token()
	require.ErrorIs(t, err, io.EOF, "%s: trailing data after the dashboard object", dashboardPath)
	return d
}

// panels returns every non-row panel, rows' nested panels included.
func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

func (d dashboard) queries() []query {
	var out []query
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			out = append(out, query{where: p.Title + " / " + tg.RefID, expr: tg.Expr})
		}
	}
	return out
}

// requiredPanels are the panels the deployment issue asks for, each with a metric its
// queries must use.
var requiredPanels = map[string]string{
	"Requests by path and reason":                    "triage_decisions_total",
	"x-router-latency quantiles":                     "triage_router_latency_seconds_bucket",
	"Batch sizes":                                    "triage_batcher_batch_size_bucket",
	"Cache hit rate":                                 "triage_cache_requests_total",
	"Slow-path load and threshold":                   "triage_slow_load",
	"In flight per replica (gateway view)":           "triage_upstream_inflight",
	"Time to first token per replica":                "vllm:time_to_first_token_seconds_bucket",
	"Tokens per pool":                                "triage_upstream_tokens_total",
	"Slow share against its budget":                  "triage_slow_share",
	"Cost per hour: spent and all-slow":              "triage_upstream_cost_baseline_total",
	"Saved vs all-slow":                              "triage_upstream_cost_total",
	"Time to first token per replica (gateway view)": "triage_upstream_ttft_seconds_bucket",
	"TTFT target attainment per pool":                "triage_upstream_slo_total",
}

func TestDashboardStructure(t *testing.T) {
	d := readDashboard(t)
	require.NotEmpty(t, d.UID)
	require.Equal(t, "Triage", d.Title)

	var ds struct {
		Datasources []struct {
			Name string `yaml:"name"`
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, grafanaDatasources, &ds)
	require.Len(t, ds.Datasources, 1)
	promDS := ds.Datasources[0]
	require.Equal(t, "prometheus", promDS.Type)

	ids := map[int]bool{}
	byTitle := map[string]panel{}
	for _, p := range d.allPanels() {
		require.False(t, ids[p.ID], "panel id %d used twice", p.ID)
		ids[p.ID] = true
		require.NotEmpty(t, p.Title, "panel %d has no title", p.ID)
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		byTitle[p.Title] = p
		for _, tg := range p.Targets {
			require.NotEmpty(t, strings.TrimSpace(tg.Expr), "panel %q target %s has no expr", p.Title, tg.RefID)
			for _, ref := range []*datasourceRef{p.Datasource, tg.Datasource} {
				if ref != nil {
					require.Equal(t, promDS.UID, ref.UID, "panel %q must use the provisioned datasource", p.Title)
				}
			}
			_, err := expandGrafana(tg.Expr)
			require.NoError(t, err, "panel %q", p.Title)
			names, err := metricNames(tg.Expr)
			require.NoError(t, err, "panel %q", p.Title)
			require.NotEmpty(t, names, "panel %q target %s queries no metric", p.Title, tg.RefID)
		}
	}
	for title, metric := range requiredPanels {
		p, ok := byTitle[title]
		require.True(t, ok, "the dashboard has no panel %q", title)
		var used []string
		for _, tg := range p.Targets {
			names, _ := metricNames(tg.Expr)
			used = append(used, names...)
		}
		require.Contains(t, used, metric, "panel %q", title)
	}

	// The provider loads the directory the compose file mounts the dashboards into.
	var prov struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, grafanaProviders, &prov)
	require.Len(t, prov.Providers, 1)
	require.Equal(t, "file", prov.Providers[0].Type)
	c := readCompose(t)
	graf := c.service(t, "grafana")
	require.Contains(t, graf.Volumes, "./grafana/dashboards:"+prov.Providers[0].Options.Path+":ro")
	require.Contains(t, graf.Volumes, "./grafana/provisioning:/etc/grafana/provisioning:ro")
	u, err := url.Parse(promDS.URL)
	require.NoError(t, err)
	prom := c.service(t, "prometheus")
	require.Equal(t, "prometheus", u.Hostname(), "the datasource must reach the compose service")
	require.Len(t, prom.Ports, 1)
	published := strings.Split(composeDefaults(prom.Ports[0]), ":") // [address:]host:container
	require.Equal(t, u.Port(), published[len(published)-1], "the datasource must reach Prometheus' container port")
}

// ---- Kubernetes -------------------------------------------------------------------------

type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec yaml.Node         `yaml:"spec"`
}

type deploymentSpec struct {
	Replicas int `yaml:"replicas"`
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Template struct {
		Metadata struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			TerminationGracePeriodSeconds int         `yaml:"terminationGracePeriodSeconds"`
			Containers                    []container `yaml:"containers"`
			Volumes                       []struct {
				Name      string `yaml:"name"`
				ConfigMap *struct {
					Name  string `yaml:"name"`
					Items []struct {
						Key  string `yaml:"key"`
						Path string `yaml:"path"`
					} `yaml:"items"`
				} `yaml:"configMap"`
			} `yaml:"volumes"`
		} `yaml:"spec"`
	} `yaml:"template"`
}

type container struct {
	Name  string `yaml:"name"`
	Image string `yaml:"image"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string     `yaml:"name"`
		Value     *string    `yaml:"value"`
		ValueFrom *yaml.Node `yaml:"valueFrom"`
	} `yaml:"env"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	StartupProbe   *probe `yaml:"startupProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string    `yaml:"path"`
		Port yaml.Node `yaml:"port"`
	} `yaml:"httpGet"`
}

type serviceSpec struct {
	Selector map[string]string `yaml:"selector"`
	Ports    []struct {
		Name       string    `yaml:"name"`
		Port       int       `yaml:"port"`
		TargetPort yaml.Node `yaml:"targetPort"`
	} `yaml:"ports"`
}

func readK8s(t *testing.T) []k8sObject {
	t.Helper()
	raw, err := os.ReadFile(path(k8sPath))
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var out []k8sObject
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "%s: document %d", k8sPath, len(out)+1)
		require.NotEmpty(t, o.APIVersion, "%s: document %d has no apiVersion", k8sPath, len(out)+1)
		require.NotEmpty(t, o.Kind, "%s: document %d has no kind", k8sPath, len(out)+1)
		require.NotEmpty(t, o.Metadata.Name, "%s: %s without a name", k8sPath, o.Kind)
		out = append(out, o)
	}
	return out
}

func only(t *testing.T, objs []k8sObject, kind, name string) k8sObject {
	t.Helper()
	var found []k8sObject
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			found = append(found, o)
		}
	}
	require.Len(t, found, 1, "%s: want exactly one %s %s", k8sPath, kind, name)
	return found[0]
}

// knownEnv is every variable the gateway reads: the scalar settings and TRIAGE_CONFIG.
func knownEnv() map[string]bool {
	m := map[string]bool{config.EnvConfigFile: true}
	for _, v := range config.EnvVars() {
		m[v.Name] = true
	}
	return m
}

func requireKnownEnv(t *testing.T, where string, names []string) {
	t.Helper()
	known := knownEnv()
	for _, n := range names {
		if strings.HasPrefix(n, config.EnvPrefix) {
			require.True(t, known[n], "%s sets %s, which the gateway does not know (see `triage --help`)", where, n)
		}
	}
}

// loadConfig loads file with the project's loader (strict YAML, then env) under env.
func loadConfig(t *testing.T, file string, env []string) config.Config {
	t.Helper()
	if env == nil {
		env = []string{}
	}
	cfg, err := config.Load(config.Sources{File: file, Environ: env})
	require.NoError(t, err, "loading %s", file)
	return cfg
}

func portOf(t *testing.T, listen string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(listen)
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return n
}

func TestKubernetesManifest(t *testing.T) {
	objs := readK8s(t)
	cm := only(t, objs, "ConfigMap", "triage-config")
	dep := only(t, objs, "Deployment", "triage")
	svcObj := only(t, objs, "Service", "triage")
	require.Equal(t, "apps/v1", dep.APIVersion)

	var d deploymentSpec
	require.NoError(t, dep.Spec.Decode(&d))
	require.GreaterOrEqual(t, d.Replicas, 1)
	require.NotEmpty(t, d.Selector.MatchLabels)
	for k, v := range d.Selector.MatchLabels {
		require.Equal(t, v, d.Template.Metadata.Labels[k], "selector label %s must match the pod template", k)
	}
	require.Len(t, d.Template.Spec.Containers, 1)
	c := d.Template.Spec.Containers[0]

	// Environment: every TRIAGE_ variable exists; literal values are what the config gets.
	env := map[string]string{}
	var names []string
	for _, e := range c.Env {
		names = append(names, e.Name)
		switch {
		case e.Value != nil:
			env[e.Name] = *e.Value
		case e.ValueFrom != nil && (e.Name == "TRIAGE_ADMIN_TOKEN" || e.Name == "REDIS_PASSWORD"):
			env[e.Name] = strings.Repeat("k", 32) // a Secret in the cluster
		default:
			t.Fatalf("env %s: no value and no handled valueFrom", e.Name)
		}
	}
	requireKnownEnv(t, k8sPath+" Deployment", names)
	require.Contains(t, env, config.EnvConfigFile)
	require.Contains(t, env, "TRIAGE_SERVER_LISTEN")

	// The config file is the ConfigMap's triage.yaml, mounted where TRIAGE_CONFIG says.
	cfgPath := env[config.EnvConfigFile]
	var mountVolume string
	for _, m := range c.VolumeMounts {
		if filepath.Dir(cfgPath) == filepath.Clean(m.MountPath) {
			mountVolume = m.Name
		}
	}
	require.NotEmpty(t, mountVolume, "no volume is mounted at %s (TRIAGE_CONFIG %s)", filepath.Dir(cfgPath), cfgPath)
	var key string
	for _, v := range d.Template.Spec.Volumes {
		if v.Name != mountVolume {
			continue
		}
		require.NotNil(t, v.ConfigMap, "volume %s must be the ConfigMap", v.Name)
		require.Equal(t, cm.Metadata.Name, v.ConfigMap.Name)
		for _, it := range v.ConfigMap.Items {
			if it.Path == filepath.Base(cfgPath) {
				key = it.Key
			}
		}
		if len(v.ConfigMap.Items) == 0 {
			key = filepath.Base(cfgPath)
		}
	}
	require.NotEmpty(t, key, "the ConfigMap volume does not provide %s", filepath.Base(cfgPath))
	body, ok := cm.Data[key]
	require.True(t, ok, "ConfigMap %s has no key %s", cm.Metadata.Name, key)

	// Load it with the gateway's own loader: strict keys, validation, and the Deployment's
	// environment on top, as the container does.
	file := filepath.Join(t.TempDir(), key)
	require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	cfg := loadConfig(t, file, environ)
	require.False(t, cfg.Pools.Empty(), "the Kubernetes config must point the pools at real servers")
	require.Equal(t, env["TRIAGE_SERVER_LISTEN"], cfg.Server.Listen)
	if v, ok := env["TRIAGE_CLASSIFIER_INTRA_OP_THREADS"]; ok {
		require.Equal(t, v, strconv.Itoa(cfg.Classifier.IntraOpThreads))
	}

	requireK8sFleet(t, objs, cfg, c)

	// Probes, ports and resources.
	require.Len(t, c.Ports, 1)
	port := c.Ports[0]
	require.Equal(t, portOf(t, cfg.Server.Listen), port.ContainerPort, "containerPort must be the listen port")
	probePath := func(name string, p *probe) string {
		require.NotNil(t, p, "%s is missing", name)
		require.NotNil(t, p.HTTPGet, "%s must be an httpGet probe", name)
		require.Contains(t, []string{port.Name, strconv.Itoa(port.ContainerPort)}, p.HTTPGet.Port.Value, "%s port", name)
		return p.HTTPGet.Path
	}
	require.Equal(t, "/healthz", probePath("livenessProbe", c.LivenessProbe))
	require.Equal(t, "/readyz", probePath("readinessProbe", c.ReadinessProbe))
	if c.StartupProbe != nil {
		require.Equal(t, "/healthz", probePath("startupProbe", c.StartupProbe))
	}
	require.NotEmpty(t, c.Resources.Requests["cpu"], "resources.requests.cpu")
	require.NotEmpty(t, c.Resources.Requests["memory"], "resources.requests.memory")
	require.NotEmpty(t, c.Resources.Limits["memory"], "resources.limits.memory")
	grace := time.Duration(d.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	require.Greater(t, grace, cfg.Server.ShutdownTimeout, "terminationGracePeriodSeconds must exceed server.shutdown_timeout")

	// The Service selects the pods and targets the container port.
	var s serviceSpec
	require.NoError(t, svcObj.Spec.Decode(&s))
	require.NotEmpty(t, s.Selector)
	for k, v := range s.Selector {
		require.Equal(t, v, d.Template.Metadata.Labels[k], "Service selector %s", k)
	}
	require.Len(t, s.Ports, 1)
	require.Contains(t, []string{port.Name, strconv.Itoa(port.ContainerPort)}, s.Ports[0].TargetPort.Value)
}

// requireK8sFleet checks the manifest's fleet mode: the Redis of fleet.url is a Service of
// the manifest selecting a Redis Deployment on a pinned image, and the gateway reads its
// password from the Secret the Redis container takes it from.
func requireK8sFleet(t *testing.T, objs []k8sObject, cfg config.Config, gateway container) {
	t.Helper()
	require.True(t, cfg.Fleet.Enabled, "the manifest runs 3 replicas: fleet mode on")
	u, err := url.Parse(cfg.Fleet.URL)
	require.NoError(t, err)
	var svc serviceSpec
	svcObj := only(t, objs, "Service", u.Hostname())
	require.NoError(t, svcObj.Spec.Decode(&svc))
	require.Len(t, svc.Ports, 1)
	require.Equal(t, u.Port(), strconv.Itoa(svc.Ports[0].Port), "fleet.url's port is the Service's")
	var d deploymentSpec
	depObj := only(t, objs, "Deployment", u.Hostname())
	require.NoError(t, depObj.Spec.Decode(&d))
	require.Equal(t, 1, d.Replicas, "one Redis: the fleet's state is in one place")
	for k, v := range svc.Selector {
		require.Equal(t, v, d.Template.Metadata.Labels[k], "Service %s selector %s", u.Hostname(), k)
	}
	require.Len(t, d.Template.Spec.Containers, 1)
	redis := d.Template.Spec.Containers[0]
	require.Regexp(t, pinnedImage, redis.Image, "pin the Redis image by version")
	secretOf := func(c container, name string) string {
		for _, e := range c.Env {
			if e.Name == name && e.ValueFrom != nil {
				var ref struct {
					SecretKeyRef struct {
						Name string `yaml:"name"`
						Key  string `yaml:"key"`
					} `yaml:"secretKeyRef"`
				}
				require.NoError(t, e.ValueFrom.Decode(&ref))
				return ref.SecretKeyRef.Name + "/" + ref.SecretKeyRef.Key
			}
		}
		return ""
	}
	require.NotEmpty(t, cfg.Fleet.PasswordEnv, "Redis in a cluster has a password")
	want := secretOf(gateway, cfg.Fleet.PasswordEnv)
	require.NotEmpty(t, want, "the gateway's %s (fleet.password_env) comes from a Secret", cfg.Fleet.PasswordEnv)
	require.Equal(t, want, secretOf(redis, "REDIS_PASSWORD"), "Redis takes its password from the gateway's Secret")
}

// ---- Dockerfile -------------------------------------------------------------------------

type dockerInstr struct {
	cmd  string // upper-cased
	args string
}

// readDockerfile returns the instructions, continuation lines joined, comments dropped.
func readDockerfile(t *testing.T) []dockerInstr {
	t.Helper()
	raw, err := os.ReadFile(path(dockerfilePath))
	require.NoError(t, err)
	var out []dockerInstr
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		out = append(out, dockerInstr{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
	}
	for _, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return out
}

// dockerEnv parses ENV key=value pairs (the only form the Dockerfile uses).
func dockerEnv(t *testing.T, args string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, f := range strings.Fields(args) {
		k, v, ok := strings.Cut(f, "=")
		require.True(t, ok, "ENV %q: use the key=value form", args)
		m[k] = strings.Trim(v, `"`)
	}
	return m
}

// pinnedImage is an image reference whose tag is a version (not latest, not a bare
// distribution name), optionally with a digest.
var pinnedImage = regexp.MustCompile(`^[a-z0-9./_-]+:v?[0-9][A-Za-z0-9._-]*(@sha256:[0-9a-f]{64})?$`)

func TestDockerfile(t *testing.T) {
	instrs := readDockerfile(t)
	var stages, runs []string
	named := map[string]bool{}        // stage names (FROM ... AS name)
	globalArgs := map[string]string{} // ARG before the first FROM: what FROM ${ARG} can name
	env := map[string]string{}
	var user, healthcheck, entrypoint string
	var expose []string
	runtimeStage, seenFrom := false, false
	for _, in := range instrs {
		switch in.cmd {
		case "ARG":
			if !seenFrom {
				k, v, _ := strings.Cut(in.args, "=")
				globalArgs[k] = strings.Trim(v, `"`)
			}
		case "FROM":
			seenFrom = true
			f := strings.Fields(in.args)
			img := f[0]
			if arg, ok := strings.CutPrefix(img, "${"); ok {
				// A build argument picks the stage; its default must build without one.
				def, ok := globalArgs[strings.TrimSuffix(arg, "}")]
				require.True(t, ok, "FROM %s: no ARG with a default before the first FROM", img)
				img = def
			}
			stages = append(stages, img)
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				named[f[2]] = true
			}
			runtimeStage = len(f) == 1 // the unnamed last stage
		case "COPY":
			for _, f := range strings.Fields(in.args) {
				if img, ok := strings.CutPrefix(f, "--from="); ok && strings.Contains(img, ":") {
					stages = append(stages, img)
				}
			}
		case "RUN":
			runs = append(runs, in.args)
		case "ENV":
			if runtimeStage {
				for k, v := range dockerEnv(t, in.args) {
					env[k] = v
				}
			}
		case "USER":
			user = in.args
		case "HEALTHCHECK":
			healthcheck = in.args
		case "EXPOSE":
			expose = append(expose, strings.Fields(in.args)...)
		case "ENTRYPOINT":
			entrypoint = in.args
		}
	}
	for _, img := range stages {
		if named[img] {
			continue
		}
		require.Regexp(t, pinnedImage, img, "base images must be pinned by version")
	}
	raw, err := os.ReadFile(path(dockerfilePath))
	require.NoError(t, err)
	require.NotRegexp(t, `(?mi)^#\s*syntax\s*=`, string(raw),
		"no `# syntax=` directive: BuildKit would fetch the frontend image from a registry")
	require.GreaterOrEqual(t, len(stages), 2, "multi-stage build")
	require.True(t, slices.ContainsFunc(runs, func(r string) bool {
		return strings.Contains(r, "scripts/setup.sh ort tok encoders")
	}), "the build stage must run the project's setup steps (scripts/setup.sh ort tok encoders)")

	var names []string
	for k := range env {
		names = append(names, k)
	}
	requireKnownEnv(t, dockerfilePath, names)
	require.Contains(t, env, config.EnvConfigFile, "the config path is set by environment")
	require.Contains(t, env, "TRIAGE_SERVER_LISTEN", "the listen address is set by environment")
	require.NotEmpty(t, user, "the runtime stage runs as a non-root user")
	require.NotContains(t, []string{"root", "0", "0:0"}, user)
	require.Contains(t, healthcheck, "--healthcheck", "the gateway's own probe of /healthz (triage --healthcheck)")
	require.Contains(t, expose, strconv.Itoa(portOf(t, env["TRIAGE_SERVER_LISTEN"])))
	require.Contains(t, entrypoint, "triage")

	// The image's default config file is config/example.yaml: it has no replicas, so the
	// image started bare stops (fail closed) and `docker run triage:dev --simulate` serves the
	// built-in simulated pools; with the image's environment it loads with that flag.
	_, err = config.Load(config.Sources{File: path("config/example.yaml"), Environ: envList(env)})
	require.ErrorContains(t, err, `pool "fast" has no replica`)
	cfg, err := config.Load(config.Sources{File: path("config/example.yaml"), Environ: envList(env), Simulate: true})
	require.NoError(t, err)
	require.Equal(t, env["TRIAGE_SERVER_LISTEN"], cfg.Server.Listen)
}

// TestDockerignore keeps the two context filters alike: the classic builder (Docker's
// without buildx, docker-compose v1: what CI builds with) reads only the root .dockerignore,
// BuildKit reads docker/Dockerfile.dockerignore next to the Dockerfile.
func TestDockerignore(t *testing.T) {
	rules := func(rel string) []string {
		raw, err := os.ReadFile(path(rel))
		require.NoError(t, err)
		var out []string
		for _, line := range strings.Split(string(raw), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				out = append(out, line)
			}
		}
		return out
	}
	classic, buildkit := rules(".dockerignore"), rules("docker/Dockerfile.dockerignore")
	require.Equal(t, classic, buildkit, ".dockerignore and docker/Dockerfile.dockerignore must list the same rules")
	for _, p := range []string{".git", ".deps", "bin"} {
		require.Contains(t, classic, p, "the host's %s stays out of the build context", p)
	}
}

func envList(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

// dockerfileEnv returns the runtime stage's ENV.
func dockerfileEnv(t *testing.T) map[string]string {
	t.Helper()
	env := map[string]string{}
	runtimeStage := false
	for _, in := range readDockerfile(t) {
		switch in.cmd {
		case "FROM":
			runtimeStage = len(strings.Fields(in.args)) == 1
		case "ENV":
			if runtimeStage {
				for k, v := range dockerEnv(t, in.args) {
					env[k] = v
				}
			}
		}
	}
	return env
}

// ---- compose stack ----------------------------------------------------------------------

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       *yaml.Node        `yaml:"build"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	StopGracePeriod string   `yaml:"stop_grace_period"`
	ReadOnly        bool     `yaml:"read_only"`
	Tmpfs           []string `yaml:"tmpfs"`
}

// composeVar matches compose's ${NAME:-default} substitution.
var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*):-([^}]*)\}`)

// composeDefaults is s as compose reads it with none of its variables set.
func composeDefaults(s string) string { return composeVar.ReplaceAllString(s, "$2") }

func readYAML(t *testing.T, rel string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path(rel))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, v), "%s", rel)
}

// readCompose reads docker/compose.yaml; yaml.v3 resolves its anchors and merge keys.
func readCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	readYAML(t, composePath, &c)
	return c
}

func (c composeFile) service(t *testing.T, name string) composeService {
	t.Helper()
	s, ok := c.Services[name]
	require.True(t, ok, "%s has no service %q", composePath, name)
	return s
}

// flagValue returns the value of --name in args ("--name v" or "--name=v").
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// gatewayServices are the compose services that run the gateway: the image's default
// entrypoint (the mockllm services name theirs), sorted by name.
func (c composeFile) gatewayServices(t *testing.T) []string {
	t.Helper()
	img := c.service(t, "triage").Image
	var out []string
	for name, s := range c.Services {
		if s.Image == img && len(s.Entrypoint) == 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func TestComposeStack(t *testing.T) {
	c := readCompose(t)
	gw := c.service(t, "triage")
	require.NotNil(t, gw.Build, "the gateway service builds docker/Dockerfile")

	// The gateways: known variables, the compose config mounted where TRIAGE_CONFIG says,
	// the container port published, a distinct fleet gateway id each.
	gateways := c.gatewayServices(t)
	require.Equal(t, []string{"triage", "triage-b"}, gateways, "two gateways in fleet mode")
	var cfg config.Config
	var gwPort int
	ids := map[string]string{}
	for i, name := range gateways {
		s := c.service(t, name)
		var names []string
		for k := range s.Environment {
			names = append(names, k)
		}
		requireKnownEnv(t, composePath+" service "+name, names)
		env := dockerfileEnv(t)
		for k, v := range s.Environment {
			env[k] = v
		}
		require.Contains(t, s.Volumes, "./"+filepath.Base(composeConfigPath)+":"+env[config.EnvConfigFile]+":ro", "service %s", name)
		cfg = loadConfig(t, path(composeConfigPath), envList(env))
		require.False(t, cfg.Pools.Empty())
		require.True(t, cfg.Fleet.Enabled, "service %s: fleet mode", name)
		require.NotEmpty(t, cfg.Fleet.GatewayID, "service %s: TRIAGE_FLEET_GATEWAY_ID names it in the fleet's metrics", name)
		require.NotContains(t, ids, cfg.Fleet.GatewayID, "service %s: fleet gateway id shared with %s", name, ids[cfg.Fleet.GatewayID])
		ids[cfg.Fleet.GatewayID] = name
		gwPort = portOf(t, cfg.Server.Listen)
		// Published on the listen port ([address:]host:container, with variables); the first
		// gateway on the same host port by default.
		require.Len(t, s.Ports, 1, "service %s", name)
		published := strings.Split(composeDefaults(s.Ports[0]), ":")
		require.Equal(t, strconv.Itoa(gwPort), published[len(published)-1], "service %s: the container port is the listen port", name)
		if i == 0 {
			require.Equal(t, strconv.Itoa(gwPort), published[len(published)-2], "published on the same port by default")
		}
		// The engine's SIGKILL must not cut the drain short, and the root file system is
		// read-only (the image writes nothing at run time; the container tests run it so too).
		grace, err := time.ParseDuration(s.StopGracePeriod)
		require.NoError(t, err, "service %s: stop_grace_period", name)
		require.Greater(t, grace, cfg.Server.ShutdownTimeout, "service %s: stop_grace_period must exceed server.shutdown_timeout", name)
		require.True(t, s.ReadOnly, "service %s: read_only", name)
	}

	// The fleet's Redis is a service of the stack, on a pinned image, unpublished.
	u, err := url.Parse(cfg.Fleet.URL)
	require.NoError(t, err)
	rs := c.service(t, u.Hostname())
	require.Regexp(t, pinnedImage, composeDefaults(rs.Image), "service %s: pin the image by version", u.Hostname())
	require.Empty(t, rs.Ports, "service %s: Redis has no password here, so it must not be published", u.Hostname())
	require.NotNil(t, rs.Healthcheck, "service %s: the gateways wait for it to be healthy", u.Hostname())
	require.Contains(t, rs.Command, "--maxmemory", "service %s: the shared cache's memory bound", u.Hostname())

	// Every replica is a mockllm service of the same image with the pool's preset, listening
	// on the URL's port; and every mockllm service is a replica.
	mockllms := map[string]composeService{}
	for name, s := range c.Services {
		if slices.Equal(s.Entrypoint, []string{"mockllm"}) {
			require.Equal(t, gw.Image, s.Image, "service %s runs the gateway's image", name)
			require.NotNil(t, s.Healthcheck, "service %s must override the image's gateway HEALTHCHECK", name)
			require.True(t, s.ReadOnly, "service %s: read_only", name)
			mockllms[name] = s
		}
	}
	require.Len(t, mockllms, 4, "two fast and two slow mockllm replicas")
	type replica struct{ pool, id string }
	byTarget := map[string]replica{}
	for pool, pc := range map[string]upstream.PoolConfig{"fast": cfg.Pools.Fast, "slow": cfg.Pools.Slow} {
		require.Len(t, pc.Replicas, 2, "pool %s", pool)
		for _, r := range pc.Replicas {
			u, err := url.Parse(r.URL)
			require.NoError(t, err)
			s, ok := mockllms[u.Hostname()]
			require.True(t, ok, "pool %s replica %s is not a mockllm service", pool, r.URL)
			require.Equal(t, pool, flagValue(s.Command, "preset"), "service %s", u.Hostname())
			require.Equal(t, u.Port(), strconv.Itoa(portOf(t, flagValue(s.Command, "listen"))), "service %s", u.Hostname())
			require.Equal(t, r.ID, flagValue(s.Command, "name"), "service %s: --name is the replica id", u.Hostname())
			byTarget[u.Host] = replica{pool: pool, id: r.ID}
		}
	}
	require.Len(t, byTarget, 4)

	// Prometheus scrapes the gateway and exactly those replicas, labelled like the gateway
	// labels them.
	pc := readPromConfig(t)
	tj := pc.job(t, "triage")
	require.Len(t, tj.StaticConfigs, 1)
	var gwTargets []string
	for _, name := range gateways {
		gwTargets = append(gwTargets, name+":"+strconv.Itoa(gwPort))
	}
	require.Equal(t, gwTargets, tj.StaticConfigs[0].Targets, "Prometheus scrapes every gateway")
	mj := pc.job(t, "mockllm")
	seen := map[string]bool{}
	for _, sc := range mj.StaticConfigs {
		for _, tg := range sc.Targets {
			r, ok := byTarget[tg]
			require.True(t, ok, "Prometheus scrapes %s, which is no replica of the gateway config", tg)
			require.Equal(t, r.pool, sc.Labels["pool"], "target %s", tg)
			require.Equal(t, r.id, sc.Labels["replica"], "target %s", tg)
			seen[tg] = true
		}
	}
	require.Len(t, seen, len(byTarget), "Prometheus must scrape every replica")
	for _, s := range []string{"prometheus", "grafana", "redis"} {
		require.Regexp(t, pinnedImage, composeDefaults(c.service(t, s).Image), "service %s: pin the image by version", s)
	}
}
