package classifier

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFormatInput(t *testing.T) {
	require.Equal(t, "Do it", FormatInput("  Do it ", "   "))
	require.Equal(t, "Do it [SEP] the doc", FormatInput("Do it", " the doc\n"))
}

func TestStageNames(t *testing.T) {
	require.Equal(t, "encoder", StageEncoder.String())
	require.Equal(t, "static", StageStatic.String())
	require.Equal(t, "stage(7)", Stage(7).String())
}
