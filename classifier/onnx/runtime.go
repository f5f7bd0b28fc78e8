package onnx

import (
	"fmt"
	"os"
	"strings"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

// RuntimeVersion is the ONNX Runtime release the pinned onnxruntime_go
// (v1.27.0) was built against. Another minor release may lack the API
// version the wrapper asks for, so a mismatch is refused at load.
const RuntimeVersion = "1.24"

// The ONNX Runtime environment is process-wide: it is created by the first
// classifier and kept until DestroyRuntime, so a hot reload reuses it.
var runtime struct {
	mu   sync.Mutex
	path string
}

// initRuntime loads the shared library once per process.
func initRuntime(lib string) error {
	runtime.mu.Lock()
	defer runtime.mu.Unlock()
	if ort.IsInitialized() {
		if lib != runtime.path {
			return fmt.Errorf("onnxruntime already loaded from %s; cannot switch to %s without a restart", runtime.path, lib)
		}
		return nil
	}
	if _, err := os.Stat(lib); err != nil {
		return fmt.Errorf("onnxruntime library %s: %w (run scripts/setup.sh ort)", lib, err)
	}
	ort.SetSharedLibraryPath(lib)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return fmt.Errorf("onnxruntime library %s: %w (want ONNX Runtime %s.x)", lib, err, RuntimeVersion)
	}
	if v := ort.GetVersion(); !strings.HasPrefix(v, RuntimeVersion+".") {
		_ = ort.DestroyEnvironment()
		return fmt.Errorf("onnxruntime library %s is version %s; want %s.x (the version onnxruntime_go v1.27.0 was built against)", lib, v, RuntimeVersion)
	}
	runtime.path = lib
	return nil
}

// DestroyRuntime frees the process-wide ONNX Runtime environment. Call it
// once at process exit, after every Classifier is closed.
func DestroyRuntime() error {
	runtime.mu.Lock()
	defer runtime.mu.Unlock()
	if !ort.IsInitialized() {
		return nil
	}
	runtime.path = ""
	return ort.DestroyEnvironment()
}
