// Package translate turns Anthropic Messages requests and OpenAI Responses requests into
// OpenAI chat completion requests and their answers back, streamed and not, for pools whose
// replicas speak only chat.
//
// What maps, field by field, is in the table tests (messages_test.go, responses_test.go)
// and in docs/http-api.md. Messages fields with no chat counterpart (thinking,
// cache_control, service_tier, ...) are dropped; Responses requests are translated as text
// conversations, and what has no chat form here (tools, tool items, previous_response_id)
// is an *Untranslatable error for the caller to refuse. What the client reads back is
// always a well-formed answer of its API.
//
// # Concurrency and ownership
//
// The functions are pure. A Stream or ResponsesStream is one answer's reader: it belongs to the goroutine
// that reads it, and reads its source on that goroutine only.
//
// It imports no other package of the project.
package translate
