package drills

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/triage-gw/triage/bench/load"
	"github.com/triage-gw/triage/bench/promtext"
	"github.com/triage-gw/triage/cmd/triage-bench/internal/gatewayproc"
	"github.com/triage-gw/triage/internal/childproc"
	"github.com/triage-gw/triage/internal/redistest"
	"github.com/triage-gw/triage/sim"
)

// redisProc is a real redis-server on a fixed 127.0.0.1 port, without persistence, that
// can be killed and started again on the same port (the outage drill).
type redisProc struct {
	bin, addr, logPath string
	p                  *childproc.Proc
}

func startRedis(ctx context.Context, bin, logPath string) (*redisProc, error) {
	addr, err := childproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	r := &redisProc{bin: bin, addr: addr, logPath: logPath}
	return r, r.start(ctx)
}

func (r *redisProc) url() string { return "redis://" + r.addr }

func (r *redisProc) start(ctx context.Context) error {
	_, port, _ := net.SplitHostPort(r.addr)
	n, _ := strconv.Atoi(port)
	p, err := childproc.Start(r.bin, redistest.Args(n), childproc.Options{LogPath: r.logPath})
	if err != nil {
		return err
	}
	r.p = p
	return childproc.WaitFor(ctx, p, 10*time.Second, 50*time.Millisecond, "redis-server", func() bool {
		c, err := net.DialTimeout("tcp", r.addr, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 7)
		_, err = c.Write([]byte("PING\r\n"))
		n, _ := c.Read(buf)
		return err == nil && strings.HasPrefix(string(buf[:n]), "+PONG")
	})
}

func (r *redisProc) kill() { r.p.Kill() }

// replica is a mockllm process.
type replica struct {
	id, url string
	p       *childproc.Proc
}

// simArgs renders a sim.Config as mockllm flags, every setting spelled out.
func simArgs(c sim.Config) []string {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	c.BindFlags(fs)
	var args []string
	fs.VisitAll(func(f *flag.Flag) { args = append(args, "--"+f.Name+"="+f.Value.String()) })
	return args
}

// startReplicas starts n mockllm processes of cfg (named <prefix>-<i>, seeded seed+i) and
// waits until each answers /health.
func startReplicas(ctx context.Context, bin, logDir, prefix string, cfg sim.Config, n int) ([]*replica, error) {
	client := load.NewClient(2, 2*time.Second)
	defer client.CloseIdleConnections()
	var out []*replica
	for i := range n {
		addr, err := childproc.FreeAddr()
		if err != nil {
			return out, err
		}
		c := cfg
		c.Name, c.Seed = fmt.Sprintf("%s-%d", prefix, i), cfg.Seed+uint64(i)
		args := append([]string{"--listen", addr, "--log-level", "warn"}, simArgs(c)...)
		p, err := childproc.Start(bin, args, childproc.Options{LogPath: filepath.Join(logDir, c.Name+".log")})
		if err != nil {
			return out, err
		}
		r := &replica{id: c.Name, url: "http://" + addr, p: p}
		out = append(out, r)
		if err := childproc.WaitFor(ctx, p, 10*time.Second, 50*time.Millisecond, c.Name,
			func() bool { return childproc.HTTPOK(ctx, client, r.url+"/health") }); err != nil {
			return out, err
		}
	}
	return out, nil
}

func killReplicas(rs []*replica) {
	for _, r := range rs {
		r.p.Kill()
	}
}

// replicaCounters sums a counter or gauge over replicas' /metrics (vLLM names).
func replicaCounters(ctx context.Context, c *http.Client, rs []*replica, names ...string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, r := range rs {
		s, err := promtext.Scrape(ctx, c, r.url+"/metrics")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.id, err)
		}
		for _, n := range names {
			out[n] += s.Sum(n)
		}
	}
	return out, nil
}

// fleetGateways is one set of gateway processes sharing pools (and, in fleet mode, Redis).
type fleetGateways struct {
	gws []*gatewayproc.Gateway
}

// startGateways starts n gateways, gateway i with the config yaml(i) written to
// <logDir>/<name>-gw<i>.yaml, and waits until every one is ready.
func startGateways(ctx context.Context, c *fleetConfig, name string, n int, yaml func(i int) string) (*fleetGateways, error) {
	set := &fleetGateways{}
	gc := gatewayproc.Config{Bin: c.Bin, Workdir: c.Workdir, StartupTimeout: c.StartupTimeout}
	for i := range n {
		base := filepath.Join(c.logDir, fmt.Sprintf("%s-gw%d", name, i))
		if err := os.WriteFile(base+".yaml", []byte(yaml(i)), 0o644); err != nil {
			set.stop()
			return nil, err
		}
		gw, err := gatewayproc.Start(ctx, gc, base+".yaml", base+".log")
		if err != nil {
			set.stop()
			return nil, fmt.Errorf("%s gateway %d: %w", name, i, err)
		}
		set.gws = append(set.gws, gw)
	}
	return set, nil
}

// stop stops every gateway still running (SIGTERM, then SIGKILL after 20 s).
func (s *fleetGateways) stop() error {
	var errs []error
	for _, g := range s.gws {
		errs = append(errs, g.Stop())
	}
	return errors.Join(errs...)
}

func (s *fleetGateways) urls(path string) []string {
	out := make([]string, len(s.gws))
	for i, g := range s.gws {
		out[i] = g.Base + path
	}
	return out
}
