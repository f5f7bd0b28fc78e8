//go:build docker

package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/upstream"
)

// notRunHere names the compose services TestComposeUp leaves out, and why. Every other
// service of docker/compose.yaml is started, so a service added to the file is run (and, if
// Prometheus scrapes it, checked to be up) without a change here.
var notRunHere = map[string]string{
	"grafana": "grafana/grafana cannot be pulled here and Debian does not package Grafana; " +
		"its provisioning and dashboard are checked by TestComposeStack, TestDashboardStructure and TestGatewayStack",
}

// TestComposeUp runs docker/compose.yaml with Debian's docker-compose (v1): the two
// gateways of the image under test in fleet mode, their Redis, the mockllm replicas and
// Prometheus (public images, or the stand-ins scripts/standin-images.sh builds from Debian's
// packages). Requests go through the gateways on published 127.0.0.1 ports; the gateways
// must share results through Redis, and Prometheus must scrape every target and count them.
func TestComposeUp(t *testing.T) {
	requireImage(t)
	composeBin := dockerTool(t, "docker-compose")
	c := readCompose(t)
	require.Equal(t, image, c.service(t, "triage").Image, "the compose stack runs the image under test")

	// What to start, with which images and ports. ${NAME:-public image} becomes the image
	// present here (the public one, or its stand-in); every ${..._PORT:-n} becomes 0, a free
	// port on 127.0.0.1 that `docker-compose port` reports.
	env := []string{"PUBLISH_ADDRESS=127.0.0.1"}
	var services []string
	for name, s := range c.Services {
		if why, ok := notRunHere[name]; ok {
			t.Logf("not started: %s: %s", name, why)
			continue
		}
		services = append(services, name)
		if m := composeVar.FindStringSubmatch(s.Image); m != nil && m[0] == s.Image {
			use := strings.TrimSpace(cli(t, time.Minute, nil, path("scripts/standin-images.sh"), "--which", m[2]))
			env = append(env, m[1]+"="+use)
		} else if s.Image != image {
			cli(t, time.Minute, nil, "docker", "image", "inspect", s.Image)
		}
		for _, p := range s.Ports {
			for _, m := range composeVar.FindAllStringSubmatch(p, -1) {
				if strings.HasSuffix(m[1], "_PORT") {
					env = append(env, m[1]+"=0")
				}
			}
		}
	}
	for name := range notRunHere {
		c.service(t, name) // the list names services that exist
	}
	sort.Strings(services)

	project := fmt.Sprintf("triage-test-%d", os.Getpid())
	args := func(a ...string) []string {
		return append([]string{"--ansi", "never", "-p", project, "-f", path(composePath)}, a...)
	}
	compose := func(timeout time.Duration, a ...string) string {
		t.Helper()
		return cli(t, timeout, env, "docker-compose", args(a...)...)
	}
	t.Cleanup(func() {
		if _, err := cliErr(2*time.Minute, env, composeBin, args("down", "-v", "--remove-orphans", "-t", "20")...); err != nil {
			t.Errorf("docker-compose down: %v", err)
		}
	})
	t.Logf("docker-compose -p %s up -d %s (%s)", project, strings.Join(services, " "), strings.Join(env, " "))
	compose(5*time.Minute, append([]string{"up", "-d", "--no-build"}, services...)...)

	// The stack's logs, kept for a failure report; the process ends when every container has.
	logs := start(t, "docker-compose logs", root, env, nil, composeBin, args("logs", "-f", "--no-color")...)
	published := func(service string, port int) string {
		out := strings.TrimSpace(compose(30*time.Second, "port", service, strconv.Itoa(port)))
		require.Regexp(t, `^127\.0\.0\.1:\d+$`, out, "%s:%d is published on 127.0.0.1", service, port)
		return "http://" + out
	}
	gwCfg := loadConfig(t, path(composeConfigPath), envList(dockerfileEnv(t)))
	gateway := published("triage", portOf(t, gwCfg.Server.Listen))
	prom := &prometheus{url: published("prometheus", 9090), proc: logs}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gatewayB := published("triage-b", portOf(t, gwCfg.Server.Listen))
	for _, gw := range []string{gateway, gatewayB} {
		require.NoError(t, poll(ctx, logs, 250*time.Millisecond, func() error {
			_, err := get(gw + "/readyz")
			return err
		}), "the gateway container at %s never became ready", gw)
	}

	// Fleet mode: both gateways reach the redis service and see each other, and a text
	// classified by one is a hit of the shared tier on the other.
	require.NoError(t, poll(ctx, logs, 250*time.Millisecond, func() error {
		for _, gw := range []string{gateway, gatewayB} {
			m, err := get(gw + "/metrics")
			if err != nil {
				return err
			}
			for _, want := range []string{"triage_fleet_up 1\n", "triage_fleet_gateways 2\n"} {
				if !strings.Contains(m, want) {
					return fmt.Errorf("%s/metrics has no %q yet", gw, strings.TrimSpace(want))
				}
			}
		}
		return nil
	}), "the two gateways never formed a fleet on the redis service")
	// The texts differ in words, not numbers: the shipped model's noise filter drops words with
	// digits before the cache, so "Name 2 rivers" and "Name 3 rivers" are one entry.
	run := strings.Map(func(r rune) rune { return 'a' + (r-'0')%26 }, strconv.Itoa(os.Getpid()))
	texts := make([]string, 4)
	for i, what := range []string{"rivers", "bridges", "lighthouses", "islands"} {
		texts[i] = fmt.Sprintf("Name the %s near the harbour of container run %s", what, run)
		resp, body := post(t, gateway+"/v1/classify", fmt.Sprintf(`{"text":%q}`, texts[i]))
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.NotContains(t, body, `"cache_tier"`, "a new text is classified, not found")
	}
	time.Sleep(time.Second) // the shared tier is written behind the answer
	for _, text := range texts {
		resp, body := post(t, gatewayB+"/v1/classify", fmt.Sprintf(`{"text":%q}`, text))
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Contains(t, body, `"cache_tier":"shared"`, "gateway b must find gateway a's result in Redis")
	}

	// Traffic through the gateway: the pools are the mockllm containers.
	(&stack{gateway: gateway}).traffic(t)
	replicas := map[string]string{} // id → pool
	for pool, pc := range map[string]upstream.PoolConfig{"fast": gwCfg.Pools.Fast, "slow": gwCfg.Pools.Slow} {
		for _, r := range pc.Replicas {
			replicas[r.ID] = pool
		}
	}
	const chats = 6
	for i := range chats {
		resp, body := post(t, gateway+"/v1/chat/completions",
			fmt.Sprintf(`{"model":"auto","max_tokens":3,"messages":[{"role":"user","content":"Write a haiku about harbour number %d"}]}`, i))
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		path, replica := resp.Header.Get("x-router-path"), resp.Header.Get("x-router-replica")
		require.Contains(t, []string{"fast", "slow"}, path)
		require.Equal(t, path, replicas[replica], "x-router-replica %q is a %s replica of the compose config", replica, path)
	}

	// Prometheus scrapes the gateway and every replica, and counts the requests.
	key := []string{
		`count(up{job="triage"} == 1) == 2`,
		`count(triage_fleet_up{job="triage"} == 1) == 2`,
		fmt.Sprintf(`sum(triage_requests_total{job="triage",endpoint="chat_completions",code="200"}) >= %d`, chats+2),
		`triage_decisions_total{job="triage"}`,
	}
	for id, pool := range replicas {
		key = append(key,
			fmt.Sprintf(`up{job="mockllm",pool=%q,replica=%q} == 1`, pool, id),
			fmt.Sprintf(`vllm:num_requests_running{pool=%q,replica=%q}`, pool, id),
			fmt.Sprintf(`triage_upstream_scraped_waiting_requests{job="triage",pool=%q,replica=%q}`, pool, id),
			fmt.Sprintf(`triage_upstream_requests_total{pool=%q,replica=%q}`, pool, id))
	}
	wantTargets := len(readPromConfigTargets(t))
	require.NoError(t, poll(ctx, logs, time.Second, func() error {
		for _, q := range key {
			res, err := prom.query(q)
			if err != nil {
				return err
			}
			if len(res) == 0 {
				return fmt.Errorf("no result yet for %s", q)
			}
		}
		// Every target of prometheus.yml scraped successfully (one not scraped yet is "unknown").
		body, err := get(prom.url + "/api/v1/targets?state=active")
		if err != nil {
			return err
		}
		var targets struct {
			Data struct {
				ActiveTargets []struct {
					ScrapePool string `json:"scrapePool"`
					ScrapeURL  string `json:"scrapeUrl"`
					Health     string `json:"health"`
					LastError  string `json:"lastError"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &targets); err != nil {
			return err
		}
		if n := len(targets.Data.ActiveTargets); n != wantTargets {
			return fmt.Errorf("Prometheus has %d targets, prometheus.yml lists %d", n, wantTargets)
		}
		for _, tg := range targets.Data.ActiveTargets {
			if tg.Health != "up" {
				return fmt.Errorf("target %s (%s) is %s: %s", tg.ScrapeURL, tg.ScrapePool, tg.Health, tg.LastError)
			}
		}
		return nil
	}), "Prometheus never scraped the whole stack")

	// The image's HEALTHCHECK, as compose runs it, turns healthy.
	gwID := strings.TrimSpace(compose(30*time.Second, "ps", "-q", "triage"))
	require.NoError(t, poll(ctx, logs, time.Second, func() error {
		out, err := cliErr(30*time.Second, nil, dockerTool(t, "docker"), "inspect", "-f", "{{.State.Health.Status}}", gwID)
		if err != nil {
			return err
		}
		if s := strings.TrimSpace(out); s != "healthy" {
			return fmt.Errorf("gateway container health: %s", s)
		}
		return nil
	}), "the gateway container's HEALTHCHECK never passed")

	// Stopping the gateway is a graceful drain: exit status 0 well inside stop_grace_period.
	began := time.Now()
	compose(time.Minute, "stop", "triage")
	took := time.Since(began)
	grace, err := time.ParseDuration(c.service(t, "triage").StopGracePeriod)
	require.NoError(t, err)
	require.Less(t, took, grace, "docker-compose stop triage")
	state := cli(t, 30*time.Second, nil, "docker", "inspect", "-f", "{{.State.ExitCode}} {{.State.OOMKilled}}", gwID)
	require.Equal(t, "0 false", strings.TrimSpace(state), "the gateway's exit after SIGTERM")
}

// readPromConfigTargets lists every static target of docker/prometheus/prometheus.yml.
func readPromConfigTargets(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, sc := range readPromConfig(t).ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			out = append(out, st.Targets...)
		}
	}
	require.NotEmpty(t, out)
	return slices.Compact(out)
}
