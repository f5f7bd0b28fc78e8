package router

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
)

// fakeShared is a SharedCache in memory that counts its calls.
type fakeShared struct {
	mu   sync.Mutex
	vals map[string]string
	gets [][]string // the texts of each Get
	sets int
}

func (f *fakeShared) Get(_ context.Context, version string, texts []string) ([]string, []bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets = append(f.gets, append([]string(nil), texts...))
	vals, found := make([]string, len(texts)), make([]bool, len(texts))
	for i, t := range texts {
		vals[i], found[i] = f.vals[version+"\x00"+t]
	}
	return vals, found
}

func (f *fakeShared) Set(version, text, val string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.vals[version+"\x00"+text] = val
	f.sets++
}

func startSharedRouter(t *testing.T, m Model, shared SharedCache) *Router {
	t.Helper()
	r, err := New(testConfig(), Options{Load: func() (Model, error) { return m, nil }, Shared: shared,
		Fast: testPool(t, "fast"), Slow: testPool(t, "slow"), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	return r
}

// A gateway's misses are looked up in the shared tier in one call per request, whatever the
// number of texts; results it classifies are written there with their stage, and another
// gateway (a second router on the same tier) then hits them without classifying.
func TestSharedTierIsConsultedOnceAndFilledWithTheStage(t *testing.T) {
	shared := &fakeShared{vals: map[string]string{}}
	a := startSharedRouter(t, &fakeModel{version: "v1", cutoff: 0.5}, shared)
	routes, errs := a.PreviewMany(context.Background(), []string{"p=0.9 one", "p=0.2 two", "p=0.7 three"})
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, shared.gets, 1, "one lookup for the three misses")
	require.Len(t, shared.gets[0], 3)
	require.Equal(t, 3, shared.sets)
	for _, rt := range routes {
		require.False(t, rt.Hit)
	}

	bModel := &fakeModel{version: "v1", cutoff: 0.5}
	b := startSharedRouter(t, bModel, shared)
	calls := bModel.calls.Load() // the startup probe
	rt, err := b.Preview(context.Background(), "p=0.7 three")
	require.NoError(t, err)
	require.True(t, rt.Hit)
	require.True(t, rt.Shared)
	require.Equal(t, "shared", rt.CacheTier())
	require.InDelta(t, 0.7, rt.PSlow, 1e-6)
	require.Equal(t, classifier.StageEncoder, rt.Stage)
	require.Equal(t, calls, bModel.calls.Load(), "b did not classify")

	b.WaitCache()
	rt, err = b.Preview(context.Background(), "p=0.7 three")
	require.NoError(t, err)
	require.Equal(t, "local", rt.CacheTier(), "a shared hit fills the local tier")

	// Another model version never sees these entries.
	c := startSharedRouter(t, &fakeModel{version: "v2", cutoff: 0.5}, shared)
	rt, err = c.Preview(context.Background(), "p=0.7 three")
	require.NoError(t, err)
	require.False(t, rt.Hit)
}
