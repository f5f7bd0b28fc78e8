package dolly

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// DefaultPath is the dataset beside the repository (shared/ next to the checkout), relative
// to the repository root where make runs the benchmarks.
const DefaultPath = "../shared/datasets/dolly-15k-dev.jsonl"

// Row is one line of the databricks-dolly-15k JSONL file.
type Row struct {
	Instruction string `json:"instruction"`
	Context     string `json:"context"`
	Response    string `json:"response"`
	Category    string `json:"category"`
}

// Load reads every row of the JSONL file at path, in file order. Blank
// lines and rows with an empty instruction are skipped; a line that is not
// a JSON object is an error naming its number, and so is a file without
// rows.
func Load(path string) ([]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open dolly: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	var rows []Row
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var r Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("dolly %s line %d: %w", path, line, err)
		}
		if r.Instruction == "" {
			continue
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read dolly %s: %w", path, err)
	}
	if len(rows) == 0 {
		return nil, errors.New("dolly: no rows in " + path)
	}
	return rows, nil
}

// Strings returns every string of rows, each row's instruction, context and response in
// file order (empty contexts and responses included): the texts a test holds a text
// function to.
func Strings(rows []Row) []string {
	out := make([]string, 0, 3*len(rows))
	for _, r := range rows {
		out = append(out, r.Instruction, r.Context, r.Response)
	}
	return out
}
