package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/predictio/predictio/formats"
)

// runBin runs the predictio binary in the repository root.
func runBin(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Join("..", "..")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// TestTraceCLI builds the real binary and runs the trace subcommands as a
// user would: help, -h, every example, exit codes and error messages.
func TestTraceCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips building and running the binary")
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "predictio")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	t.Run("help", func(t *testing.T) {
		out, _, code := runBin(t, bin, "help", "trace")
		if code != 0 || !strings.Contains(out, "Subcommands:") || !strings.Contains(out, "Example:") {
			t.Errorf("help trace: code %d\n%s", code, out)
		}
		for name := range traceSubs {
			if !strings.Contains(out, "  "+name+" ") {
				t.Errorf("help trace does not list %s", name)
			}
			o, e, code := runBin(t, bin, "trace", name, "-h")
			all := o + e
			if code != 0 || !strings.Contains(all, "Usage: predictio trace "+name) || !strings.Contains(all, "Example:") {
				t.Errorf("trace %s -h: code %d\n%s", name, code, all)
			}
		}
	})

	t.Run("usage errors exit 2", func(t *testing.T) {
		for _, args := range [][]string{
			{"trace"},
			{"trace", "bogus"},
			{"trace", "info"},
			{"trace", "info", "a", "b"},
			{"trace", "info", "--nope", "x"},
			{"trace", "cat", "testdata/seq", "--table", "nope"},
			{"trace", "export", "testdata/seq"},
			{"trace", "import", "--from", "tar", "x", "-o", filepath.Join(tmp, "never")},
			{"trace", "import", "--from", "csv", "x", "-o", filepath.Join(tmp, "never")},
			{"trace", "slice", "testdata/seq", "-o", filepath.Join(tmp, "never"), "--from", "soon"},
			{"trace", "synth", "-o", filepath.Join(tmp, "never"), "--pattern", "zigzag"},
			{"trace", "merge", "testdata/seq"},
		} {
			_, e, code := runBin(t, bin, args...)
			if code != 2 || e == "" {
				t.Errorf("%v: exit %d, stderr %q; want 2 with a message", args, code, e)
			}
		}
	})

	t.Run("failures exit 1 naming file and field", func(t *testing.T) {
		missing := filepath.Join(tmp, "missing-bundle")
		_, e, code := runBin(t, bin, "trace", "info", missing)
		if code != 1 || !strings.Contains(e, missing) {
			t.Errorf("info on missing bundle: exit %d, %q", code, e)
		}
		bad := filepath.Join(tmp, "bad.iolog")
		os.WriteFile(bad, []byte("fio version 3 iolog\n1 /f read 0 4096\n2 /f read zz 4096\n"), 0o644)
		_, e, code = runBin(t, bin, "trace", "import", "--from", "fio", bad, "-o", filepath.Join(tmp, "bad-bundle"))
		if code != 1 || !strings.Contains(e, bad+":3: field offset") {
			t.Errorf("bad iolog: exit %d, %q; want 1 naming %s:3 field offset", code, e, bad)
		}
		// A flipped byte in a table makes verify exit 1 naming the table.
		b := filepath.Join(tmp, "flipped")
		if _, e, code := runBin(t, bin, "trace", "synth", "-o", b, "--pattern", "seq", "--events", "3000"); code != 0 {
			t.Fatalf("synth: %d %s", code, e)
		}
		p := filepath.Join(b, formats.AccessesFile)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0xff
		os.WriteFile(p, data, 0o644)
		_, e, code = runBin(t, bin, "trace", "verify", b)
		if code != 1 || !strings.Contains(e, formats.AccessesFile) {
			t.Errorf("verify flipped bundle: exit %d, %q", code, e)
		}
	})

	t.Run("integrity and --no-verify", func(t *testing.T) {
		b := filepath.Join(tmp, "damaged")
		if _, e, code := runBin(t, bin, "trace", "synth", "-o", b, "--pattern", "random", "--events", "3000", "--service-ns", "100"); code != 0 {
			t.Fatalf("synth: %d %s", code, e)
		}
		p := filepath.Join(b, formats.AccessesFile)
		data, _ := os.ReadFile(p)
		// Flip a byte of the random first_page column, stored raw (behind
		// a length prefix of -1): it decodes, to a wrong value.
		raw := bytes.Index(data, bytes.Repeat([]byte{0xff}, 8))
		if raw < 0 {
			t.Fatal("no raw-stored buffer")
		}
		data[raw+8+100] ^= 0x01
		os.WriteFile(p, data, 0o644)
		// Every reader refuses, naming the file.
		for _, args := range [][]string{
			{"trace", "info", b},
			{"trace", "cat", b},
			{"trace", "export", b, "--parquet", filepath.Join(tmp, "damaged-pq")},
			{"trace", "slice", b, "-o", filepath.Join(tmp, "damaged-slice")},
			{"simulate", b},
			{"train", "markov", "-o", filepath.Join(tmp, "damaged.model"), b},
		} {
			_, e, code := runBin(t, bin, args...)
			if code != 1 || !strings.Contains(e, p) || !strings.Contains(e, "corrupt bundle") {
				t.Errorf("%v on a damaged bundle: exit %d, %q; want 1 naming %s", args, code, e, p)
			}
			// With --no-verify it reads, and says so.
			o, e, code := runBin(t, bin, append(args, "--no-verify")...)
			if !strings.Contains(e, "--no-verify: bundle integrity checks skipped") {
				t.Errorf("%v --no-verify: exit %d, stderr %q: it does not say verification was skipped", args, code, e)
			}
			if args[1] == "info" && (code != 0 || !strings.Contains(o, "not verified (--no-verify)")) {
				t.Errorf("info --no-verify: exit %d\n%s%s", code, o, e)
			}
		}
		// verify: damage is not a truncation.
		_, e, code := runBin(t, bin, "trace", "verify", b)
		if code != 1 || !strings.Contains(e, "restore the bundle from a copy") || strings.Contains(e, "trace repair") {
			t.Errorf("verify of a damaged bundle: exit %d\n%s; want advice to restore it and none to repair", code, e)
		}
		// A killed writer's bundle gets the repair advice.
		k := filepath.Join(tmp, "killed-advice")
		w, err := formats.Create(k)
		if err != nil {
			t.Fatal(err)
		}
		w.AddFile(formats.File{ID: 1, Ino: 1, Path: "/f"})
		w.Append(&formats.Access{TS: 1, FileID: 1, NPages: 1, Kind: formats.KindRead})
		w.Flush()
		w.Abort()
		_, e, code = runBin(t, bin, "trace", "verify", k)
		if code != 1 || !strings.Contains(e, "trace repair "+k) || strings.Contains(e, "restore the bundle") {
			t.Errorf("verify of a killed bundle: exit %d\n%s; want the repair advice only", code, e)
		}
		// Rows referencing missing files: repair and the slice that keeps the whole part.
		m := filepath.Join(tmp, "missing-files")
		w, _ = formats.Create(m, formats.AllowUnknownFiles())
		w.AddFile(formats.File{ID: 1, Ino: 1, Path: "/f"})
		w.Append(&formats.Access{TS: 10, FileID: 1, NPages: 1, Kind: formats.KindRead})
		w.Append(&formats.Access{TS: 20, FileID: 2, NPages: 1, Kind: formats.KindRead})
		w.Close()
		_, e, code = runBin(t, bin, "trace", "verify", m)
		if code != 1 || !strings.Contains(e, "trace slice "+m+" -o OUT --to 20") {
			t.Errorf("verify of a bundle with missing files: exit %d\n%s", code, e)
		}
		_, e, code = runBin(t, bin, "simulate", m)
		if code != 1 || !strings.Contains(e, "1 of 2 accesses reference 1 file id(s)") || !strings.Contains(e, "trace repair") {
			t.Errorf("simulate of a bundle with missing files: exit %d\n%s", code, e)
		}
	})

	t.Run("info json", func(t *testing.T) {
		b := filepath.Join(tmp, "json")
		runBin(t, bin, "trace", "synth", "-o", b, "--pattern", "btree", "--events", "2000")
		out, e, code := runBin(t, bin, "trace", "info", b, "--json")
		if code != 0 {
			t.Fatalf("info --json: %d %s", code, e)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("info --json: %v\n%s", err, out)
		}
		for _, k := range []string{"events", "hints", "files", "duration_ns", "bytes_per_event", "dropped"} {
			if _, ok := m[k]; !ok {
				t.Errorf("info --json lacks %q", k)
			}
		}
		if m["events"].(float64) != 2000 {
			t.Errorf("events = %v, want 2000", m["events"])
		}
	})

	t.Run("repair after SIGKILL", func(t *testing.T) {
		b := filepath.Join(tmp, "sigkilled")
		cmd := exec.Command(bin, "trace", "synth", "-o", b, "--pattern", "seq", "--events", "50000000")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill the writer once a few batches are on disk.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			st, err := os.Stat(filepath.Join(b, formats.AccessesFile))
			if err == nil && st.Size() > 1<<20 {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal("synth wrote under 1 MiB in 2 minutes")
			}
			time.Sleep(20 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		if err := cmd.Wait(); err == nil {
			t.Fatal("synth of 50 M events finished before SIGKILL; nothing to repair")
		}
		if _, _, code := runBin(t, bin, "trace", "verify", b); code != 1 {
			t.Errorf("verify of a killed bundle: exit %d, want 1", code)
		}
		out, e, code := runBin(t, bin, "trace", "repair", b)
		if code != 0 || !strings.Contains(out, "accesses.arrow: recovered") {
			t.Fatalf("repair: exit %d\n%s%s", code, out, e)
		}
		if o, e, code := runBin(t, bin, "trace", "verify", b); code != 0 {
			t.Fatalf("verify after repair: exit %d\n%s%s", code, o, e)
		}
		js, _, code := runBin(t, bin, "trace", "info", "--json", b)
		var m struct {
			Events   uint64 `json:"events"`
			Complete bool   `json:"complete"`
		}
		if code != 0 || json.Unmarshal([]byte(js), &m) != nil || m.Events == 0 || m.Events >= 50000000 || m.Complete {
			t.Errorf("info after repair: exit %d, %+v", code, m)
		}
	})

	t.Run("examples", func(t *testing.T) {
		// A bundle whose writer died, for the repair example.
		w, err := formats.Create(filepath.Join(tmp, "killed-bundle"))
		if err != nil {
			t.Fatal(err)
		}
		w.AddFile(formats.File{ID: 0, Path: "/f", Mode: formats.ModeRegular})
		w.Append(&formats.Access{TS: 1, NPages: 1, Kind: formats.KindRead})
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		subs := []*command{commands["trace"]}
		for _, s := range traceSubs {
			subs = append(subs, &s.command)
		}
		for _, c := range subs {
			for _, line := range strings.Split(c.example, "\n") {
				for _, part := range strings.Split(line, "&&") {
					args := strings.Fields(strings.ReplaceAll(part, "/var/tmp/", tmp+"/"))
					if len(args) == 0 || args[0] != "predictio" {
						t.Fatalf("example %q does not start with predictio", part)
					}
					if len(args) > 2 && args[len(args)-2] == "|" {
						continue
					}
					o, e, code := runBin(t, bin, args[1:]...)
					if code != 0 {
						t.Errorf("example %q: exit %d\n%s%s", part, code, o, e)
					}
				}
			}
		}
	})
}
