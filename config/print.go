package config

import (
	_ "embed"
	"maps"
	"net/url"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/triage-gw/triage/upstream"
)

// Example is config/example.yaml: every setting, commented, with its default. A test keeps it
// equal to DefaultConfig.
//
//go:embed example.yaml
var Example []byte

// redactedValue replaces secrets in printed configs.
const redactedValue = "<redacted>"

// Redacted returns a copy of c safe to print: the admin token and every replica header
// value (they typically carry API keys) are replaced by "<redacted>", and passwords in
// replica URLs by "xxxxx".
func (c Config) Redacted() Config {
	if c.Admin.Token != "" {
		c.Admin.Token = redactedValue
	}
	c.Pools.Fast = redactPool(c.Pools.Fast)
	c.Pools.Slow = redactPool(c.Pools.Slow)
	return c
}

func redactPool(p upstream.PoolConfig) upstream.PoolConfig {
	p.Replicas = slices.Clone(p.Replicas)
	for i, r := range p.Replicas {
		if u, err := url.Parse(r.URL); err == nil && u.User != nil {
			p.Replicas[i].URL = u.Redacted()
		}
		if len(r.Headers) == 0 {
			continue
		}
		h := maps.Clone(r.Headers)
		for k := range h {
			h[k] = redactedValue
		}
		p.Replicas[i].Headers = h
	}
	return p
}

// YAML renders c, secrets redacted, in the form Load reads.
func (c Config) YAML() ([]byte, error) { return yaml.Marshal(c.Redacted()) }
