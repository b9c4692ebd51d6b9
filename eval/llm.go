package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/predictio/predictio/internal/harness"
	"github.com/predictio/predictio/internal/workload/ggufmodel"
	"github.com/predictio/predictio/internal/workload/llamacpp"
)

func init() { Register(llmSuite{}) }

// llmSuite is the paper's figure 12: llama.cpp (node-llama-cpp's prebuilt
// binaries, on the CPU) loading a GGUF model cold, with mmap and without,
// to its first token. The models are generated: format-valid GGUF files
// of Llama-3-8B shapes with random weights and a tiny vocabulary (no
// weights can be downloaded here), tensors in Hugging Face name order as
// many converted files have them.
type llmSuite struct{}

func (llmSuite) Info() Info {
	return Info{
		Name: "llm", Figures: "12",
		Measures: "llama.cpp loading a generated GGUF model cold to its first token (Llama-3-8B shapes, Q4_0 about 4 GB and Q8_0 about 7.4 GB), with mmap and without: wall time, load_ms and first_token_ms; Baseline, Noop and Tensor",
		Needs:    "node and node-llama-cpp 3.22.1 in $PREDICTIO_LLM_DIR or /var/tmp/llm (scripts/setup.sh installs it); predictio run (issue 12) with the GGUF adapter for Noop and Tensor; about 12 GB of disk",
		Expected: func(quick bool, dev harness.Preset) time.Duration {
			switch {
			case quick:
				return 90 * time.Second
			case dev.Name == "hdd":
				return 3 * time.Hour
			}
			return 20 * time.Minute // 16m12s measured on 2026-12-01, building the models included
		},
		Paper: []PaperFigure{{Figure: "12", Caption: "LLM cold start: Qwen3-8B-Q4_K_M (4.7 GiB), Qwen3.5-9B-Q8_0 (8.9 GiB), Qwen3.5-9B-UD-Q8_K_XL (12.1 GiB)",
			Values: []string{"mmap: PredictIO -8.8% to -11.5%", "no-mmap: -17.7% (Q4), -46.2% to -47.9% (the two Q8 models)", "Noop within 3% of Baseline"},
			Plot: &Figure{Name: "paper-fig12", Title: "Paper figure 12 (ranges from its text)", YLabel: "latency / Baseline", RefY: 1,
				Categories: []string{"mmap", "no-mmap Q4", "no-mmap Q8"},
				Series: []Series{{Name: "PredictIO", Y: []float64{1 - 0.1015, 1 - 0.177, 1 - 0.4705},
					Lo: []float64{1 - 0.115, 1 - 0.177, 1 - 0.479}, Hi: []float64{1 - 0.088, 1 - 0.177, 1 - 0.462}}}}}},
		Compare: func(s *SuiteResult) []Comparison {
			q8 := pointWith(s, "8b-q8/no-mmap", true)
			q4 := pointWith(s, "8b-q4/no-mmap", true)
			mm := pointWith(s, "8b-q8/mmap", true)
			if q8 == "" {
				q8 = pointWith(s, "small-q8/no-mmap", true)
			}
			return []Comparison{
				{"LLM load, no-mmap Q8, Tensor / Baseline (" + q8 + ")", "0.52-0.54 (-46.2% to -47.9%)", ratioText(s, q8, "tensor", "baseline", "wall_s")},
				{"LLM load, no-mmap Q4, Tensor / Baseline", "0.82 (-17.7%)", ratioText(s, q4, "tensor", "baseline", "wall_s")},
				{"LLM load, mmap, Tensor / Baseline", "0.89-0.91 (-8.8% to -11.5%)", ratioText(s, mm, "tensor", "baseline", "wall_s")},
				{"LLM load, Noop / Baseline (" + q8 + ")", "within 3% of 1", ratioText(s, q8, "noop", "baseline", "wall_s")},
			}
		},
		Plots: func(s *SuiteResult) []*Figure {

			return []*Figure{normalizedBars(s, "llm-normalized", "LLM load to the first token (figure 12)", "wall time / Baseline", "wall_s", "baseline",
				[]string{"baseline", "noop", "tensor"})}
		},
	}
}

// llmDir is where node-llama-cpp is installed.
func llmDir() string {
	if d := os.Getenv("PREDICTIO_LLM_DIR"); d != "" {
		return d
	}
	return "/var/tmp/llm"
}

type llmModel struct {
	id    string
	model ggufmodel.Model
}

func llmModels(quick bool) []llmModel {
	if quick {
		return []llmModel{{"small-q8", ggufmodel.Small(ggufmodel.Q8_0)}}
	}
	return []llmModel{{"8b-q4", ggufmodel.Llama8B(ggufmodel.Q4_0)}, {"8b-q8", ggufmodel.Llama8B(ggufmodel.Q8_0)}}
}

var llmModes = []liveMode{
	{name: "baseline", alone: true},
	{name: "noop", policies: []string{"tensor"}, backend: "none"},
	{name: "tensor", policies: []string{"tensor"}},
}

func (llmSuite) Plan(ctx context.Context, c *Context) (*Plan, error) {
	dir := llmDir()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-llama-cpp")); err != nil {
		return &Plan{NotRun: fmt.Sprintf("needs node-llama-cpp %s in %s: NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install node-llama-cpp@%s there (scripts/setup.sh does; set PREDICTIO_LLM_DIR for another directory)",
			llamacpp.Version, dir, llamacpp.Version)}, nil
	}
	lr := probeRun(ctx, c.Predictio)
	plan := &Plan{Notes: []string{"The loader is node-llama-cpp's load.mjs (internal/workload/llamacpp): getLlama({gpu: false, build: \"never\"}), loadModel({modelPath, useMmap}), one token. " +
		"wall_s is the whole node command (library load included); load_ms ends when loadModel returns, first_token_ms when the first token is out (with mmap, when the weights were really read). " +
		"The models are generated with random weights: a format-valid GGUF of real shapes, not a trained model."}}
	libs := filepath.Join(dir, "node_modules", "@node-llama-cpp")
	for _, lm := range llmModels(c.Quick) {
		path := c.workPath("llm-" + lm.id + ".gguf")
		if err := buildGGUF(c, path, lm.model); err != nil {
			return nil, err
		}
		loads := []bool{true, false}
		if c.Quick {
			loads = []bool{false} // the no-mmap path: the larger opportunity, and half the time
		}
		for _, mmap := range loads {
			cmd, err := llamacpp.Command(ctx, dir, path, mmap)
			if err != nil {
				return &Plan{NotRun: err.Error()}, nil
			}
			mode := map[bool]string{true: "mmap", false: "no-mmap"}[mmap]
			plan.Points = append(plan.Points, &PointSpec{
				ID: lm.id + "/" + mode, Params: map[string]string{"model": lm.id, "load": mode, "bytes": fmt.Sprint(fileSize(path))},
				Files: []string{path, libs}, Est: llmEst(c, path),
				Modes: liveModeSpecs(lr, dir, cmd.Args, llmModes, c.Policies, parseLoad),
			})
		}
	}
	return plan, nil
}

func llmEst(c *Context, path string) time.Duration {
	d := time.Duration(fileSize(path)/(600<<20)) * time.Second // about 600 MB/s cold here
	if c.Device.Name == "hdd" {
		d = time.Duration(fileSize(path)/(150<<20)) * time.Second
	}
	return max(d+2*time.Second, 2*time.Second)
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// buildGGUF writes the model once (a marker file says it is complete).
func buildGGUF(c *Context, path string, m ggufmodel.Model) error {
	if keepFile(path) {
		return nil
	}
	startOver(path)
	c.Log("eval: llm: generating %s (random weights; gigabytes at full size)", path)
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("generate gguf: %w", err)
	}
	n, err := ggufmodel.Write(f, m, true)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("generate gguf %s: %w", path, err)
	}
	return markComplete(path, fmt.Sprintf("ggufmodel layers=%d embd=%d type=%d bytes=%d", m.Layers, m.Embd, m.Type, n))
}

// parseLoad reads load.mjs's JSON line.
func parseLoad(out []byte, s *Sample) error {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var r llamacpp.Result
		if json.Unmarshal([]byte(lines[i]), &r) == nil && r.LoadMS > 0 {
			s.Metrics["load_ms"] = r.LoadMS
			s.Metrics["first_token_ms"] = r.FirstTokenMS
			s.Metrics["library_ms"] = r.LibraryMS
			return nil
		}
	}
	return fmt.Errorf("llama.cpp printed no load report: %s", tail(out, 300))
}
