package classifier

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConfigValidateNamesFields(t *testing.T) {
	cfg := DefaultConfig()
	require.NoError(t, cfg.Validate())
	cfg.ModelDir, cfg.MaxPadWaste, cfg.MaxGroupTokens = "", -1, 10
	err := cfg.Validate()
	require.Error(t, err)
	for _, f := range []string{"classifier.model_dir", "classifier.max_pad_waste", "classifier.max_group_tokens"} {
		require.Contains(t, err.Error(), f)
	}
}

func TestCheckFilesNamesTheSettingToChange(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ModelDir, cfg.EncoderDir, cfg.ORTLibrary = "no-such-models", "no-such-encoder", "no-such-lib.so"
	err := cfg.CheckFiles("classifier")
	require.Error(t, err)
	for _, want := range []string{
		"classifier.model_dir: no-such-models/manifest.json not found", "TRIAGE_CLASSIFIER_MODEL_DIR",
		"classifier.encoder_dir: no-such-encoder/model.onnx not found", "TRIAGE_CLASSIFIER_ENCODER_DIR",
		"classifier.onnxruntime_lib: no-such-lib.so not found", "TRIAGE_CLASSIFIER_ONNXRUNTIME_LIB",
	} {
		require.ErrorContains(t, err, want)
	}
}
