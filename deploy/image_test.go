//go:build docker

package deploy

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// imageSizeGoal is the most the image may weigh (the engine's uncompressed size, in bytes):
// docs/deployment.md quotes the measured size and what takes the room.
const imageSizeGoal = 250_000_000

// needle is a byte string that must not occur in the image, and why.
type needle struct {
	what string
	b    []byte
}

// hostNeedles are the traces of the build machine that must not reach the image: its
// checkout and .deps/ paths (a libtokenizers.a built without setup.sh's path mapping would
// carry them, and make image hands in the host's), its home's toolchain and module
// directories, the certificates it trusts beyond Debian's (the stand-in build images have
// them; the image must not), and the values of environment variables named like credentials.
func hostNeedles(t *testing.T) []needle {
	t.Helper()
	var ns []needle
	addPath := func(what, p string) {
		if p != "" && p != "/" {
			ns = append(ns, needle{what, []byte(p)})
		}
	}
	addPath("the checkout's path", root)
	if deps, err := filepath.EvalSymlinks(path(".deps")); err == nil {
		addPath("the host's .deps path", deps)
	}
	if home, err := os.UserHomeDir(); err == nil {
		addPath("the host's cargo home", filepath.Join(home, ".cargo"))
		addPath("the host's rustup home", filepath.Join(home, ".rustup"))
	}
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		addPath("the host's Go module cache", strings.TrimSpace(string(out)))
	}
	crts, _ := filepath.Glob("/usr/local/share/ca-certificates/*.crt")
	for _, f := range crts {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		for rest := raw; ; {
			var blk *pem.Block
			blk, rest = pem.Decode(rest)
			if blk == nil {
				break
			}
			// A line of the PEM text as update-ca-certificates bundles it, and the DER bytes
			// (a Java keystore holds those).
			b64 := base64.StdEncoding.EncodeToString(blk.Bytes)
			mid := len(b64) / 2 / 64 * 64
			ns = append(ns,
				needle{"host CA " + filepath.Base(f) + " (PEM)", []byte(b64[mid : mid+64])},
				needle{"host CA " + filepath.Base(f) + " (DER)", blk.Bytes[len(blk.Bytes)/2 : len(blk.Bytes)/2+48]})
		}
	}
	t.Logf("host CAs checked: %d (from /usr/local/share/ca-certificates)", len(crts))
	secretName := regexp.MustCompile(`(?i)token|secret|passw|api_?key|credential|auth`)
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if secretName.MatchString(k) && len(v) >= 8 {
			ns = append(ns, needle{"the value of $" + k, []byte(v)})
		}
	}
	return ns
}

// forbidden names files that have no business in a runtime image: version control,
// credentials, the build stage's toolchains and sources, the host's extra certificates.
func forbidden(name string) string {
	parts := strings.Split(strings.TrimPrefix(name, "./"), "/")
	for _, p := range parts {
		switch p {
		case ".git", ".ssh", ".netrc", ".pypirc", ".git-credentials", "credentials.toml", ".docker", "id_rsa", "id_ed25519":
			return "credentials or version control (" + p + ")"
		}
	}
	clean := strings.Join(parts, "/")
	for _, pre := range []string{"usr/local/go/", "usr/local/cargo/", "usr/local/rustup/", "src/", "root/go/", "app/.deps/downloads/", "app/.deps/build/", "app/.deps/tokenizers/"} {
		if strings.HasPrefix(clean, pre) {
			return "build-stage content (" + pre + ")"
		}
	}
	if strings.HasPrefix(clean, "usr/local/share/ca-certificates/") && strings.HasSuffix(clean, ".crt") {
		return "a locally added CA certificate"
	}
	return ""
}

// imageFile is one regular file of the image as its layers leave it.
type imageFile struct {
	size   int64
	sha256 string
	link   string // symlink target
}

// scanImage reads `docker save` of the image: every file of every layer is checked against
// forbidden and the needles (failures are collected, not fatal), and the final view of the
// file system is returned, with each layer's size.
func scanImage(t *testing.T, needles []needle) (files map[string]imageFile, problems []string) {
	t.Helper()
	cmd := exec.Command(dockerTool(t, "docker"), "save", image)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	files = map[string]imageFile{}
	outer := tar.NewReader(out)
	layers := 0
	for {
		hdr, err := outer.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "docker save %s: %s", image, stderr.String())
		br := bufio.NewReaderSize(outer, 1<<16)
		// Layers are tar archives (legacy layout: <id>/layer.tar; OCI layout: blobs/sha256/<digest>);
		// config and manifest JSON are checked as they are.
		if magic, _ := br.Peek(262); len(magic) == 262 && string(magic[257:262]) == "ustar" {
			layers++
			inner := tar.NewReader(br)
			for {
				fh, err := inner.Next()
				if err == io.EOF {
					break
				}
				require.NoError(t, err, "layer %s", hdr.Name)
				name := strings.TrimPrefix(fh.Name, "./")
				if why := forbidden(name); why != "" {
					problems = append(problems, fmt.Sprintf("%s: %s", name, why))
				}
				switch fh.Typeflag {
				case tar.TypeSymlink:
					files[name] = imageFile{link: fh.Linkname}
				case tar.TypeReg:
					data, err := io.ReadAll(inner)
					require.NoError(t, err)
					for _, n := range needles {
						if bytes.Contains(data, n.b) {
							problems = append(problems, fmt.Sprintf("%s contains %s", name, n.what))
						}
					}
					sum := sha256.Sum256(data)
					files[name] = imageFile{size: fh.Size, sha256: hex.EncodeToString(sum[:])}
				}
			}
			continue
		}
		data, err := io.ReadAll(br)
		require.NoError(t, err)
		for _, n := range needles {
			if bytes.Contains(data, n.b) {
				problems = append(problems, fmt.Sprintf("image metadata %s contains %s", hdr.Name, n.what))
			}
		}
	}
	require.Greater(t, layers, 1, "docker save %s: no layers found", image)
	return files, problems
}

// setupPins reads scripts/setup.sh's sha256 pins: the ONNX Runtime library, and per encoder
// its model.onnx and tokenizer.json.
func setupPins(t *testing.T) (ortVersion, ortSHA string, encoders map[string][2]string) {
	t.Helper()
	raw, err := os.ReadFile(path("scripts/setup.sh"))
	require.NoError(t, err)
	s := string(raw)
	one := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `=(\S+)$`).FindStringSubmatch(s)
		require.NotNil(t, m, "scripts/setup.sh has no %s=", name)
		return m[1]
	}
	encoders = map[string][2]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*"([a-z0-9.-]+)\|[^|]+\|[0-9a-f]{64}\|[^|]+\|([0-9a-f]{64})\|[^|]+\|([0-9a-f]{64})"$`).FindAllStringSubmatch(s, -1) {
		encoders[m[1]] = [2]string{m[2], m[3]}
	}
	require.NotEmpty(t, encoders, "no encoder rows found in scripts/setup.sh")
	return one("ORT_VERSION"), one("ORT_SO_SHA256"), encoders
}

// TestImage inspects the image as it ships: its configuration and size, its history, and
// every file of every layer.
func TestImage(t *testing.T) {
	requireImage(t)
	var info []struct {
		Size   int64
		Config struct {
			User         string
			Env          []string
			Entrypoint   []string
			WorkingDir   string
			ExposedPorts map[string]struct{}
			Healthcheck  *struct{ Test []string }
		}
	}
	require.NoError(t, json.Unmarshal([]byte(cli(t, 30*time.Second, nil, "docker", "image", "inspect", image)), &info))
	require.Len(t, info, 1)
	cfg := info[0].Config
	needles := hostNeedles(t)

	t.Run("configuration", func(t *testing.T) {
		require.Equal(t, "10001:10001", cfg.User, "runs as uid 10001, not root")
		require.Equal(t, []string{"/usr/local/bin/triage"}, cfg.Entrypoint)
		require.Equal(t, "/app", cfg.WorkingDir, "the classifier's relative default paths resolve under /app")
		require.Contains(t, cfg.ExposedPorts, "8080/tcp")
		require.NotNil(t, cfg.Healthcheck, "the image has a HEALTHCHECK")
		require.Equal(t, []string{"CMD", "/usr/local/bin/triage", "--healthcheck"}, cfg.Healthcheck.Test,
			"the gateway's own probe of /healthz, so the image needs no curl")
		// Exactly these variables: a proxy setting, a token or a build argument leaking into
		// the environment would show up here.
		var names []string
		for _, kv := range cfg.Env {
			k, _, _ := strings.Cut(kv, "=")
			names = append(names, k)
		}
		slices.Sort(names)
		require.Equal(t, []string{"PATH", "TRIAGE_CONFIG", "TRIAGE_SERVER_LISTEN"}, names)
	})

	t.Run("size", func(t *testing.T) {
		hist := cli(t, 30*time.Second, nil, "docker", "history", "--format", "{{.Size}}\t{{.CreatedBy}}", image)
		var b strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(hist), "\n") {
			size, by, _ := strings.Cut(line, "\t")
			if size == "0B" {
				continue
			}
			if len(by) > 110 {
				by = by[:110] + "…"
			}
			fmt.Fprintf(&b, "  %8s  %s\n", size, by)
		}
		t.Logf("image %s: %.1f MB; layers:\n%s", image, float64(info[0].Size)/1e6, b.String())
		require.Less(t, info[0].Size, int64(imageSizeGoal), "the image outgrew its %d MB goal", imageSizeGoal/1_000_000)
	})

	t.Run("history names no host path or credential", func(t *testing.T) {
		hist := cli(t, 30*time.Second, nil, "docker", "history", "--no-trunc", "--format", "{{.CreatedBy}} {{.Comment}}", image)
		for _, n := range needles {
			require.NotContains(t, hist, string(n.b), "docker history %s shows %s", image, n.what)
		}
		require.NotContains(t, hist, "PREBUILT", "the final stage must not use the prebuilt build argument")
	})

	t.Run("layers", func(t *testing.T) {
		files, problems := scanImage(t, needles)
		require.Empty(t, problems, "the image's layers hold what they must not")

		// What the runtime needs is there, and is what setup.sh pins.
		ortVersion, ortSHA, encoders := setupPins(t)
		so := "app/.deps/onnxruntime/libonnxruntime.so." + ortVersion
		require.Equal(t, ortSHA, files[so].sha256, "%s is the pinned ONNX Runtime", so)
		require.Equal(t, filepath.Base(so), files["app/.deps/onnxruntime/libonnxruntime.so"].link)
		enc := "all-minilm-l6-v2" // the classifier's default encoder
		require.Equal(t, encoders[enc][0], files["app/.deps/encoders/"+enc+"/model.onnx"].sha256)
		require.Equal(t, encoders[enc][1], files["app/.deps/encoders/"+enc+"/tokenizer.json"].sha256)
		for _, f := range []string{"usr/local/bin/triage", "usr/local/bin/mockllm", "app/models/head.onnx", "app/models/manifest.json", "etc/triage/triage.yaml"} {
			require.Contains(t, files, f)
		}
		// mockllm is the gateway's binary under another name (cmd/triage runs the simulator
		// when called so), and the CA bundle is the one file of Debian's ca-certificates the
		// gateway reads: neither package nor openssl is installed.
		require.Equal(t, "triage", files["usr/local/bin/mockllm"].link)
		require.Greater(t, files["etc/ssl/certs/ca-certificates.crt"].size, int64(100_000), "the CA bundle holds Mozilla's roots")
		for name := range files {
			require.NotContains(t, []string{"usr/bin/openssl", "usr/sbin/update-ca-certificates"}, name, "the image carries %s", name)
		}

		// What takes the room, for docs/deployment.md.
		groups := map[string]int64{}
		for name, f := range files {
			parts := strings.Split(name, "/")
			n := 2
			if parts[0] == "app" || (len(parts) > 2 && parts[0] == "usr" && parts[1] == "local") {
				n = 4
			}
			groups[strings.Join(parts[:min(n, len(parts))], "/")] += f.size
		}
		keys := make([]string, 0, len(groups))
		for k := range groups {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return groups[keys[i]] > groups[keys[j]] })
		var b strings.Builder
		for _, k := range keys[:min(14, len(keys))] {
			fmt.Fprintf(&b, "  %7.1f MB  /%s\n", float64(groups[k])/1e6, k)
		}
		t.Logf("largest parts of the file system:\n%s", b.String())
	})
}
