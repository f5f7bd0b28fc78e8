package classifier

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Config locates the model files and sizes the ONNX Runtime session.
type Config struct {
	// ModelDir holds manifest.json and the head named in it (models/ in the
	// repository; models/int8 for the int8 variant).
	ModelDir string `yaml:"model_dir"`
	// EncoderDir holds model.onnx and tokenizer.json of the encoder the
	// manifest names; scripts/setup.sh fills .deps/encoders/<name>.
	EncoderDir string `yaml:"encoder_dir"`
	// ORTLibrary is the ONNX Runtime shared library (1.24.x).
	ORTLibrary string `yaml:"onnxruntime_lib"`
	// IntraOpThreads is the encoder session's intra-op thread count.
	// One caller with 2 threads beats two callers with 1 on a 2-core machine.
	IntraOpThreads int `yaml:"intra_op_threads"`
	// InterOpThreads is the session's inter-op thread count.
	InterOpThreads int `yaml:"inter_op_threads"`
	// MaxPadWaste bounds padding inside one encoder call: texts are sorted by
	// token count and a group closes when its padded size would exceed
	// (1 + MaxPadWaste) × its real tokens.
	MaxPadWaste float64 `yaml:"max_pad_waste"`
	// MaxGroupTokens caps the padded tokens of one encoder call (throughput
	// peaks at about 512–2,048 tokens per call on a 2-core machine).
	MaxGroupTokens int `yaml:"max_group_tokens"`
	// Spinning lets ONNX Runtime's intra-op threads busy-wait between
	// parallel sections. It helps a dedicated machine a little and hurts a
	// shared one badly (the spinning threads take the cores the HTTP path
	// and other processes need), so it is off by default.
	Spinning bool `yaml:"spinning"`
	// VerifyEncoder checks the encoder and tokenizer files against the
	// manifest's sha256 at load (about 0.3 s for the fp32 encoder).
	VerifyEncoder bool `yaml:"verify_encoder"`
}

// DefaultConfig returns the configuration used when nothing is set: the
// fp32 MiniLM-L6-v2 encoder and the committed head, paths relative to the
// repository root.
func DefaultConfig() Config {
	return Config{
		ModelDir:       "models",
		EncoderDir:     ".deps/encoders/all-minilm-l6-v2",
		ORTLibrary:     ".deps/onnxruntime/libonnxruntime.so",
		IntraOpThreads: 2,
		InterOpThreads: 1,
		MaxPadWaste:    0.25,
		MaxGroupTokens: 4096,
		VerifyEncoder:  true,
	}
}

// CheckFiles reports, naming the setting to change, each file the classifier needs that is
// not there: ModelDir's manifest.json, EncoderDir's model.onnx and tokenizer.json, and
// ORTLibrary. The model's New (package classifier/onnx) fails on the first of them anyway;
// this says where to look before it does.
func (c Config) CheckFiles(path string) error {
	var errs []error
	missing := func(key, file, hint string) {
		if _, err := os.Stat(file); err != nil {
			abs, _ := filepath.Abs(file)
			env := "TRIAGE_" + strings.ToUpper(strings.ReplaceAll(path+"_"+key, ".", "_"))
			errs = append(errs, fmt.Errorf("%s.%s: %s not found (absolute: %s); set %s.%s in the config file "+
				"(relative to the file) or %s to where it is (default: %s)", path, key, file, abs, path, key, env, hint))
		}
	}
	missing("model_dir", filepath.Join(c.ModelDir, "manifest.json"), "the repository's models/ folder")
	missing("encoder_dir", filepath.Join(c.EncoderDir, "model.onnx"), "installed by make setup into .deps/encoders/")
	missing("onnxruntime_lib", c.ORTLibrary, "installed by make setup into .deps/onnxruntime/")
	return errors.Join(errs...)
}

// Validate is ValidateAt("classifier").
func (c Config) Validate() error { return c.ValidateAt("classifier") }

// ValidateAt reports every invalid field, each named from path ("classifier.model_dir").
func (c Config) ValidateAt(path string) error {
	var errs []error
	if c.ModelDir == "" {
		errs = append(errs, fmt.Errorf("%s.model_dir: must not be empty", path))
	}
	if c.EncoderDir == "" {
		errs = append(errs, fmt.Errorf("%s.encoder_dir: must not be empty", path))
	}
	if c.ORTLibrary == "" {
		errs = append(errs, fmt.Errorf("%s.onnxruntime_lib: must not be empty", path))
	}
	if c.IntraOpThreads < 1 || c.IntraOpThreads > 256 {
		errs = append(errs, fmt.Errorf("%s.intra_op_threads: must be in [1, 256], got %d", path, c.IntraOpThreads))
	}
	if c.InterOpThreads < 1 || c.InterOpThreads > 256 {
		errs = append(errs, fmt.Errorf("%s.inter_op_threads: must be in [1, 256], got %d", path, c.InterOpThreads))
	}
	if c.MaxPadWaste < 0 || c.MaxPadWaste > 100 {
		errs = append(errs, fmt.Errorf("%s.max_pad_waste: must be in [0, 100], got %g", path, c.MaxPadWaste))
	}
	if c.MaxGroupTokens < 256 {
		errs = append(errs, fmt.Errorf("%s.max_group_tokens: must be >= 256 (one full-length text), got %d", path, c.MaxGroupTokens))
	}
	return errors.Join(errs...)
}
