package archtest

import (
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// TestMarkdownLinks checks every relative link of every Markdown file in the repository: the
// file or folder it names exists, and a #fragment names a heading (or an explicit anchor) of
// the Markdown file it points into, slugged as GitHub does. External links (a scheme such as
// https: or mailto:) are not fetched; a fragment on a non-Markdown file (#L12) is not checked.
// Folders whose name starts with "." (.git, .deps) and the ignored build outputs are skipped.
func TestMarkdownLinks(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root {
			if name := d.Name(); strings.HasPrefix(name, ".") || name == "bin" || name == "out" || name == "node_modules" {
				return filepath.SkipDir
			}
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, files, filepath.Join(root, "README.md"))

	anchors := map[string]map[string]bool{} // Markdown file → its anchors, read once
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		text, err := os.ReadFile(path)
		require.NoError(t, err)
		a := markdownAnchors(string(text))
		anchors[path] = a
		return a
	}

	var broken []string
	checked := 0
	for _, file := range files {
		text, err := os.ReadFile(file)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, file)
		for _, l := range markdownLinks(string(text)) {
			checked++
			if msg := checkLink(root, file, l.target, anchorsOf); msg != "" {
				broken = append(broken, rel+":"+strconv.Itoa(l.line)+": "+l.target+": "+msg)
			}
		}
	}
	t.Logf("%d links in %d Markdown files", checked, len(files))
	require.Empty(t, broken, "broken links in Markdown files:\n%s", strings.Join(broken, "\n"))
}

var scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// checkLink returns why target, written in file, is broken, or "".
func checkLink(root, file, target string, anchorsOf func(string) map[string]bool) string {
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return ""
	}
	path, frag, _ := strings.Cut(target, "#")
	if p, err := url.PathUnescape(path); err == nil {
		path = p
	}
	dest := file
	if path != "" {
		if strings.HasPrefix(path, "/") {
			dest = filepath.Join(root, path) // GitHub resolves /x from the repository root
		} else {
			dest = filepath.Join(filepath.Dir(file), path)
		}
		if _, err := os.Stat(dest); err != nil {
			return "no such file or folder"
		}
	}
	if frag == "" || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	if !anchorsOf(dest)[strings.ToLower(frag)] {
		return "no heading with this anchor"
	}
	return ""
}

type link struct {
	line   int
	target string
}

var (
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	fence      = regexp.MustCompile("^\\s{0,3}(```|~~~)")
)

// markdownLinks returns the targets of the inline links and images ([x](t), ![x](t)) and the
// reference definitions ([x]: t) of a Markdown text, outside fenced code blocks and code spans.
func markdownLinks(text string) []link {
	var out []link
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "``")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, link{i + 1, m[1]})
		}
		if m := refDef.FindStringSubmatch(line); m != nil {
			out = append(out, link{i + 1, m[1]})
		}
	}
	return out
}

var (
	atxHeading = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	linkText   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// markdownAnchors returns the anchors GitHub gives a Markdown text: one per heading outside
// fenced code blocks (a repeated slug gets -1, -2, ...), and explicit <a name|id="...">.
func markdownAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[strings.ToLower(m[1])] = true
		}
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			anchors[s+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[s] = true
		}
		seen[s]++
	}
	return anchors
}

// slug is GitHub's anchor for a heading: the heading's text (links reduced to their text),
// lower-cased, with every character that is not a letter, digit, mark, space, '-' or '_'
// dropped, and each space turned into '-'.
func slug(heading string) string {
	heading = linkText.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Routing: classification budget, fallback and model names": "routing-classification-budget-fallback-and-model-names",
		"Heterogeneous replicas (`--scenario heterogeneous`)":      "heterogeneous-replicas---scenario-heterogeneous",
		"GET /v1/models":                             "get-v1models",
		"The [cascade](x.md) end to end":             "the-cascade-end-to-end",
		"snake_case and *emphasis* — kept":           "snake_case-and-emphasis--kept",
		"Créer une clé, 2×":                          "créer-une-clé-2",
		"prefix-cache-preble":                        "prefix-cache-preble",
		"Replica policies (`triage-bench policies`)": "replica-policies-triage-bench-policies",
	} {
		require.Equal(t, want, slug(heading), heading)
	}
}

// TestMarkdownLinksFindsBreakage runs the checker on a small tree with one link of each kind.
func TestMarkdownLinksFindsBreakage(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(text), 0o644))
	}
	write("docs/a.md", "# A\n\n## Same\n\n## Same\n\n```\n# not a heading\n```\n<a name=\"here\"></a>\n")
	write("main.go", "package main\n")
	write("README.md", "")
	anchorsOf := func(p string) map[string]bool {
		text, err := os.ReadFile(p)
		require.NoError(t, err)
		return markdownAnchors(string(text))
	}
	file := filepath.Join(root, "README.md")
	for target, want := range map[string]string{
		"docs/a.md":                "",
		"docs/a.md#a":              "",
		"docs/a.md#same-1":         "",
		"docs/a.md#here":           "",
		"/docs/a.md#same":          "",
		"docs/":                    "",
		"main.go#L1":               "",
		"https://example.com/x.md": "",
		"docs/a.md#not-a-heading":  "no heading with this anchor",
		"docs/a.md#same-2":         "no heading with this anchor",
		"docs/b.md":                "no such file or folder",
		"#nothing":                 "no heading with this anchor",
	} {
		require.Equal(t, want, checkLink(root, file, target, anchorsOf), target)
	}
	links := markdownLinks("[a](x.md) `[b](y.md)` ![c](z.png \"title\")\n```\n[d](w.md)\n```\n[e]: v.md\n")
	require.Equal(t, []link{{1, "x.md"}, {1, "z.png"}, {5, "v.md"}}, links)
}
