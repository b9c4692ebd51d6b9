package llamacpp

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/predictio/predictio/internal/workload/ggufmodel"
)

// TestLoad loads a small generated model with llama.cpp and produces a
// token, without and with mmap. It needs node-llama-cpp installed in
// $PREDICTIO_LLM_DIR (default /var/tmp/llm).
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("loads llama.cpp: seconds of CPU")
	}
	dir := os.Getenv("PREDICTIO_LLM_DIR")
	if dir == "" {
		dir = "/var/tmp/llm"
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-llama-cpp")); err != nil {
		t.Fatalf("node-llama-cpp not installed in %s (scripts/setup.sh installs it): NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install node-llama-cpp@%s there (no network here: see docs/adapters.md)", dir, Version)
	}
	model := filepath.Join(t.TempDir(), "small.gguf")
	f, err := os.Create(model)
	if err != nil {
		t.Fatal(err)
	}
	m := ggufmodel.Small(ggufmodel.Q8_0)
	m.Layers = 2
	if _, err := ggufmodel.Write(f, m, true); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, mmap := range []bool{false, true} {
		r, err := Load(context.Background(), dir, model, mmap)
		if err != nil {
			t.Fatal(err)
		}
		if r.Mmap != mmap || r.Token < 0 || r.Token >= ggufmodel.Vocab || r.LoadMS <= 0 || r.FirstTokenMS < r.LoadMS || r.TokensIn == 0 {
			t.Errorf("mmap %v: %+v", mmap, r)
		}
	}
	if _, err := Command(context.Background(), t.TempDir(), model, false); err == nil || !strings.Contains(err.Error(), "npm install node-llama-cpp@3.22.1") {
		t.Errorf("a directory without node-llama-cpp: %v", err)
	}
}
