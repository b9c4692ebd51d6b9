// Package llamacpp runs llama.cpp, as the prebuilt binaries of the npm
// package node-llama-cpp ship it, to load a GGUF model on the CPU and
// produce one token: the LLM-loading workload of issue 13.
//
// Set-up, once, in a scratch directory:
//
//	NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install node-llama-cpp@3.22.1
//
// node-llama-cpp's optional dependency @node-llama-cpp/linux-x64 holds the
// llama.cpp libraries; getLlama({gpu: false, build: "never"}) loads them
// without building anything.
package llamacpp

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Version is the node-llama-cpp release this package was checked with.
const Version = "3.22.1"

//go:embed load.mjs
var loadScript []byte

// Script returns the loader script, load.mjs.
func Script() []byte { return loadScript }

// Result is what load.mjs reports.
type Result struct {
	Model        string  `json:"model"`
	Mmap         bool    `json:"mmap"`
	TokensIn     int     `json:"tokens_in"`
	Token        int     `json:"token"`
	Text         string  `json:"text"`
	LibraryMS    float64 `json:"library_ms"`
	LoadMS       float64 `json:"load_ms"`
	FirstTokenMS float64 `json:"first_token_ms"`
}

// Command returns the command that loads model from dir, the directory
// node-llama-cpp was installed in, writing load.mjs there first.
func Command(ctx context.Context, dir, model string, mmap bool) (*exec.Cmd, error) {
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-llama-cpp")); err != nil {
		return nil, fmt.Errorf("run llama.cpp: %s has no node_modules/node-llama-cpp; run `NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install node-llama-cpp@%s` there", dir, Version)
	}
	if err := os.WriteFile(filepath.Join(dir, "load.mjs"), loadScript, 0o644); err != nil {
		return nil, fmt.Errorf("run llama.cpp: %w", err)
	}
	mode := "nommap"
	if mmap {
		mode = "mmap"
	}
	abs, err := filepath.Abs(model)
	if err != nil {
		return nil, fmt.Errorf("run llama.cpp: %w", err)
	}
	cmd := exec.CommandContext(ctx, "node", "load.mjs", abs, mode)
	cmd.Dir = dir
	return cmd, nil
}

// Load runs the loader and parses its report.
func Load(ctx context.Context, dir, model string, mmap bool) (Result, error) {
	cmd, err := Command(ctx, dir, model, mmap)
	if err != nil {
		return Result{}, err
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return Result{}, fmt.Errorf("run llama.cpp on %s: %w: %s", model, err, strings.TrimSpace(stderr.String()))
	}
	var r Result
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		return Result{}, fmt.Errorf("run llama.cpp on %s: parse report %q: %w", model, out.String(), err)
	}
	return r, nil
}
