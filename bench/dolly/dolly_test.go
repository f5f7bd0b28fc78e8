package dolly

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	rows, err := Load(write("ok.jsonl", `{"instruction":"a","context":"doc","response":"r","category":"summarization"}

{"instruction":"","category":"open_qa"}
{"instruction":"b","category":"open_qa"}
`))
	require.NoError(t, err)
	require.Equal(t, []Row{
		{Instruction: "a", Context: "doc", Response: "r", Category: "summarization"},
		{Instruction: "b", Category: "open_qa"},
	}, rows, "blank lines and rows without an instruction are skipped, order kept")
	require.Equal(t, []string{"a", "doc", "r", "b", "", ""}, Strings(rows), "every row's three strings, in order")

	_, err = Load(write("bad.jsonl", "{\"instruction\":\"a\"}\nnot json\n"))
	require.ErrorContains(t, err, "line 2")
	_, err = Load(write("empty.jsonl", "{\"instruction\":\"\"}\n"))
	require.ErrorContains(t, err, "no rows")
	_, err = Load(filepath.Join(dir, "absent.jsonl"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
