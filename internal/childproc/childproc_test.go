package childproc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A child started with Group takes its own children with it when stopped: a shell that
// starts a sleep and waits is stopped, and the sleep (which ignores nothing) is gone too.
func TestGroupStopsTheChildsChildren(t *testing.T) {
	for _, stop := range []struct {
		name string
		do   func(*Proc)
	}{
		{"stop", func(p *Proc) { _ = p.Stop(5 * time.Second) }},
		{"kill", func(p *Proc) { p.Kill() }},
	} {
		t.Run(stop.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			p, err := Start("/bin/sh", []string{"-c", "sleep 300 & echo $! > " + pidFile + "; wait"}, Options{Group: true})
			require.NoError(t, err)
			var pid int
			require.NoError(t, WaitFor(t.Context(), p, 10*time.Second, 10*time.Millisecond, "sleep", func() bool {
				b, err := os.ReadFile(pidFile)
				if err != nil || !strings.HasSuffix(string(b), "\n") {
					return false
				}
				pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
				return err == nil
			}))
			require.NoError(t, syscall.Kill(pid, 0), "the grandchild runs")
			stop.do(p)
			require.False(t, p.Alive())
			// The sleep is the shell's child, not ours: once killed it is a zombie until
			// init reaps it, so wait for it to be gone or a zombie.
			require.NoError(t, WaitFor(t.Context(), nil, 10*time.Second, 10*time.Millisecond, "grandchild", func() bool {
				return gone(pid)
			}), "the grandchild went with its group")
		})
	}
}

// A group whose leader exited on its own (a server whose worker outlived it) is killed by
// Stop all the same.
func TestGroupStopAfterTheLeaderExited(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	p, err := Start("/bin/sh", []string{"-c", "sleep 300 & echo $! > " + pidFile}, Options{Group: true})
	require.NoError(t, err)
	<-p.Exited()
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.False(t, gone(pid), "the sleep outlived its shell")
	require.NoError(t, p.Stop(time.Second))
	require.NoError(t, WaitFor(t.Context(), nil, 10*time.Second, 10*time.Millisecond, "grandchild", func() bool {
		return gone(pid)
	}))
}

// gone reports whether pid no longer runs: absent, or a zombie.
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func TestExtraEnvIsAddedAndWins(t *testing.T) {
	t.Setenv("CHILDPROC_Y", "inherited")
	t.Setenv("CHILDPROC_Z", "inherited")
	out := filepath.Join(t.TempDir(), "out")
	p, err := Start("/bin/sh", []string{"-c", `echo "$CHILDPROC_X $CHILDPROC_Y $CHILDPROC_Z"`},
		Options{LogPath: out, ExtraEnv: []string{"CHILDPROC_X=1", "CHILDPROC_Z=set"}})
	require.NoError(t, err)
	<-p.Exited()
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, "1 inherited set\n", string(b))
}
