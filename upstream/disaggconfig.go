package upstream

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/triage-gw/triage/upstream/policy"
)

// Replica roles (ReplicaConfig.Role).
const (
	// RolePrefill replicas take only the prefill leg of a disaggregated
	// request: the prompt, one output token, and the engine's transfer
	// parameters back.
	RolePrefill = "prefill"
	// RoleDecode replicas take decode legs, and whole requests (a prefill that
	// failed, a request the hand-off does not apply to).
	RoleDecode = "decode"
	// RoleBoth replicas take what decode replicas take; every replica of a
	// pool that is not disaggregated is one.
	RoleBoth = "both"
)

// KV transfer kinds (DisaggregationConfig.KVTransfer): how the engines hand
// a prompt's KV cache from the prefill replica to the decode replica, and so
// what the gateway carries between the legs.
const (
	// KVTransferVLLMNixl is vLLM's NixlConnector: the prefill request carries
	// kv_transfer_params {"do_remote_decode": true, ...}, its answer a
	// kv_transfer_params object that the decode request carries unchanged.
	KVTransferVLLMNixl = "vllm-nixl"
	// KVTransferSGLang is SGLang's bootstrap hand-off (bootstrap_host,
	// bootstrap_port and bootstrap_room sent to both legs at once): the next
	// kind, refused for now.
	KVTransferSGLang = "sglang"
)

// DisaggregationConfig is a pool's prefill/decode hand-off. It applies when
// at least one replica has role prefill: then each chat or completion
// request is prefilled on a prefill replica (non-streaming, max_tokens 1) and
// decoded on a decode or both replica, which receives the prefill's KV cache
// through the engines' transfer. Whatever goes wrong before the decode leg
// has started runs the request whole on a decode or both replica instead.
type DisaggregationConfig struct {
	// KVTransfer is the engines' transfer kind: "vllm-nixl" (the default).
	// "sglang" is documented and refused: not implemented yet.
	KVTransfer string `yaml:"kv_transfer" json:"kv_transfer"`
	// LegDeadline bounds the prefill leg, from sending it to holding its
	// transfer parameters; a prefill still running then is abandoned and the
	// request runs whole. It must stay well below KVLease: the decode leg
	// starts only after it. Default 10s.
	LegDeadline Duration `yaml:"leg_deadline" json:"leg_deadline"`
	// KVLease is how long a prefill replica keeps the blocks it prefilled
	// for a decode that has not fetched them (the engine's kv_lease_duration,
	// 30 s by default in vLLM). A decode that
	// comes later reads freed blocks and answers 200 with wrong text, so
	// LegDeadline must be below it. Default 30s: set it to the engines' own.
	KVLease Duration `yaml:"kv_lease" json:"kv_lease"`
	// PrefillPolicy picks the prefill replica among the prefill replicas: a
	// policy name, configured by the pool's policy sections. Default
	// "prefix-cache": the replica that most likely holds the prompt's prefix,
	// else the least loaded.
	PrefillPolicy string `yaml:"prefill_policy" json:"prefill_policy"`
	// DecodePolicy picks the decode replica among the decode and both
	// replicas: a policy name, configured by the pool's policy sections.
	// Default "least-request". Whole requests use the pool's policy.
	DecodePolicy string `yaml:"decode_policy" json:"decode_policy"`
}

// DefaultDisaggregationConfig returns vLLM's NIXL hand-off with a 10 s leg
// deadline under a 30 s lease, prefix-cache prefill picks and least-request
// decode picks.
func DefaultDisaggregationConfig() DisaggregationConfig {
	return DisaggregationConfig{
		KVTransfer:    KVTransferVLLMNixl,
		LegDeadline:   Duration(10 * time.Second),
		KVLease:       Duration(30 * time.Second),
		PrefillPolicy: "prefix-cache",
		DecodePolicy:  "least-request",
	}
}

// role is the replica's role with the default filled in.
func (rc ReplicaConfig) role() string {
	if rc.Role == "" {
		return RoleBoth
	}
	return rc.Role
}

// disaggregated reports whether some replica of c has role prefill.
func (c *PoolConfig) disaggregated() bool {
	return slices.ContainsFunc(c.Replicas, func(rc ReplicaConfig) bool { return rc.Role == RolePrefill })
}

// validateDisaggregation checks the replicas' roles and the disaggregation
// section, naming fields from path ("pools.fast"). The section is checked
// whether or not the pool is disaggregated, so a config stays valid when a
// replica's role changes.
func (c *PoolConfig) validateDisaggregation(path string) error {
	var errs []error
	roles := []string{RolePrefill, RoleDecode, RoleBoth}
	prefill, decode := 0, 0
	for i, rc := range c.Replicas {
		switch r := rc.role(); {
		case !slices.Contains(roles, r):
			errs = append(errs, fmt.Errorf("%s.replicas[%d].role: must be one of %s, got %q", path, i, strings.Join(roles, ", "), rc.Role))
		case r == RolePrefill:
			prefill++
		default:
			decode++
		}
	}
	if prefill > 0 && decode == 0 {
		errs = append(errs, fmt.Errorf("%s.replicas: %d replica(s) with role prefill and none with role decode or both: "+
			"a disaggregated pool needs a replica to decode on (and to run requests whole when a prefill fails)", path, prefill))
	}
	d := c.Disaggregation
	dp := path + ".disaggregation"
	switch d.KVTransfer {
	case KVTransferVLLMNixl:
	case KVTransferSGLang:
		errs = append(errs, fmt.Errorf("%s.kv_transfer: %q is not supported yet (SGLang's bootstrap_host, bootstrap_port and bootstrap_room hand-off is the next kind); use %q",
			dp, d.KVTransfer, KVTransferVLLMNixl))
	default:
		errs = append(errs, fmt.Errorf("%s.kv_transfer: unknown kind %q (want %q)", dp, d.KVTransfer, KVTransferVLLMNixl))
	}
	if d.KVLease <= 0 {
		errs = append(errs, fmt.Errorf("%s.kv_lease: must be > 0, got %s", dp, d.KVLease))
	}
	if d.LegDeadline <= 0 {
		errs = append(errs, fmt.Errorf("%s.leg_deadline: must be > 0, got %s", dp, d.LegDeadline))
	} else if d.KVLease > 0 && d.LegDeadline >= d.KVLease {
		errs = append(errs, fmt.Errorf("%s.leg_deadline: must be below kv_lease (%s): a decode that starts after the lease reads freed blocks, got %s",
			dp, d.KVLease, d.LegDeadline))
	}
	names := policy.Names()
	for _, f := range []struct{ field, name string }{{"prefill_policy", d.PrefillPolicy}, {"decode_policy", d.DecodePolicy}} {
		if !slices.Contains(names, f.name) {
			errs = append(errs, fmt.Errorf("%s.%s: unknown policy %q (want one of %s)", dp, f.field, f.name, strings.Join(names, ", ")))
		}
	}
	return errors.Join(errs...)
}
