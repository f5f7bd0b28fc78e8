package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// JSON renders v indented by two spaces, with a final newline.
func JSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteFiles writes each file of files (name → content) into dir, which it
// creates if needed. It stops at the first error.
func WriteFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Publish prints md to stdout and, when out is not empty, writes v as results.json and md
// as table.md into out, saying so on stderr.
func Publish(stdout, stderr io.Writer, out string, v any, md string) error {
	fmt.Fprint(stdout, md)
	if out == "" {
		return nil
	}
	js, err := JSON(v)
	if err != nil {
		return err
	}
	if err := WriteFiles(out, map[string][]byte{"results.json": js, "table.md": []byte(md)}); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s/{results.json,table.md}\n", out)
	return nil
}
