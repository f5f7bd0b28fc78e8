// Package dolly reads the databricks-dolly-15k dataset (instruction,
// optional context document, reference response and category per line),
// the source of the prompts that triage-bench sends: the gateway's
// classifier was trained on its categories, and the multi-turn traces of
// package trace are built from its rows.
//
// # Concurrency
//
// [Load] keeps no state. The rows it returns are plain values that callers
// may share read-only.
//
// # Lifecycle
//
// Load opens, reads and closes the file within the call.
package dolly
