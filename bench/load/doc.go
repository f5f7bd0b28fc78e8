// Package load drives HTTP load at a server under test and records what each
// request looked like from the client's side.
//
// A [ClosedLoop] keeps a fixed number of workers busy, each sending its next
// request when the previous one has been answered (how interactive clients
// behave; throughput is what the server allows). An [OpenLoop] sends at
// Poisson arrival times whatever the server does (how independent users
// behave; it shows what happens beyond capacity). Both hand every request to
// a caller's function, which sends it — usually with [PostJSON] or
// [PostStream] on a client from [NewClient] — and returns its [Sample]. The
// helpers [StatusCounts], [Latencies] and [FirstError] summarise samples.
//
// Lossy behaviour, where it happens: an OpenLoop arrival that finds
// MaxInFlight requests outstanding is not sent; it is counted in
// [OpenLoopResult].Dropped, so the client never becomes the queue it measures.
//
// # Concurrency
//
// ClosedLoop.Run calls its function from Workers goroutines at once, and
// OpenLoop.Run from one goroutine per outstanding request, so the function
// must be safe for concurrent use. The request sequence numbers it receives
// are unique across goroutines. Samples are collected under a lock and
// returned sorted by send time.
//
// # Lifecycle
//
// Run blocks until the run is over and every goroutine it started has ended:
// for a ClosedLoop when Duration has passed, Limit requests have started or
// ctx ends, then the requests in flight finish; for an OpenLoop when the
// arrival window has passed (or ctx ends), then the outstanding requests
// finish, each bounded by the client's timeout. Cancelling ctx also reaches
// the function, which should pass it on to its request.
package load
