// Package translate turns Anthropic Messages requests into OpenAI chat completion requests
// and their answers back, streamed and not, for pools whose replicas speak only chat.
//
// What maps, field by field, is in the table tests (messages_test.go) and in
// docs/http-api.md. Fields with no chat counterpart (thinking, cache_control,
// service_tier, ...) are dropped; what the client reads back is always a well-formed
// Messages answer.
//
// # Concurrency and ownership
//
// The functions are pure. A Stream is one answer's reader: it belongs to the goroutine
// that reads it, and reads its source on that goroutine only.
//
// It imports no other package of the project.
package translate
