package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// defaultDolly is the dataset beside the repository (shared/ next to the
// checkout), relative to the repository root where make runs the benchmarks.
const defaultDolly = "../shared/datasets/dolly-15k-dev.jsonl"

// DollyRow is one line of the databricks-dolly-15k JSONL file.
type DollyRow struct {
	Instruction string `json:"instruction"`
	Context     string `json:"context"`
	Response    string `json:"response"`
	Category    string `json:"category"`
}

// LoadDolly reads every row of the JSONL file at path, in file order. Rows
// with an empty instruction are skipped.
func LoadDolly(path string) ([]DollyRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open dolly: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	var rows []DollyRow
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var r DollyRow
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
