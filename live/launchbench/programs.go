// Package launchbench measures cold launches of real, unmodified programs
// with predictio's live runtime (issue 12 items 6 and 7): each program is
// run cold (drop_caches, verified), baseline / noop / policy alternating
// for a number of rounds, with `predictio run` and with the daemon
// running; the time is the whole command's, predictio's start-up
// included. It also measures the daemon's cost on unrelated work (a hot
// pread loop, a compile) and checks the daemon's /metrics against what the
// programs' own I/O shows. `predictio bench launch` runs it; docs/daemon.md
// and docs/BENCHMARKS.md have the commands.
package launchbench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Program is one benchmarked launch: a command and what it needs.
type Program struct {
	Name string
	// Cmd is the command; "{work}" is replaced by the program's work
	// directory.
	Cmd []string
	// Setup makes the command's input files in dir (once).
	Setup func(dir string) error
	// Sentinels are files whose pages must be gone after drop_caches
	// (the check that a run is cold); "{work}" as in Cmd.
	Sentinels []string
	// Needs names the Debian package that provides the program, for the
	// message when it is missing.
	Needs string
}

// pyImports are the ten-plus standard-library imports of the python
// launches.
const pyImports = "import json, decimal, email.parser, http.client, xml.dom.minidom, sqlite3, csv, argparse, logging, urllib.request, zipfile, tarfile"

// Programs are the launches issue 12 names, by name.
var Programs = map[string]Program{
	"python3": { // the pyenv shim on PATH, as on many developer machines
		Name: "python3", Cmd: []string{"python3", "-c", pyImports},
		Sentinels: []string{"{py}/json/decoder.py"}, Needs: "python3 (pyenv or python3 on PATH)",
	},
	"python3-system": {
		Name: "python3-system", Cmd: []string{"/usr/bin/python3", "-c", pyImports},
		Sentinels: []string{"/usr/lib/python3.11/json/decoder.py"}, Needs: "python3",
	},
	"node": {
		Name: "node", Cmd: []string{"node", "-e", "require('http'); require('crypto'); require('zlib'); require('stream'); require('url')"},
		Needs: "nodejs",
	},
	"gcc": {
		Name: "gcc", Cmd: []string{"gcc", "-O2", "-c", "{work}/prog.c", "-o", "{work}/prog.o"},
		Setup: writeC, Sentinels: []string{"{work}/prog.c", "/usr/include/stdio.h"}, Needs: "gcc",
	},
	"sqlite3": {
		Name: "sqlite3", Cmd: []string{"sqlite3", "{work}/bench.db", "select count(*), sum(length(v)) from t where k % 7 = 3"},
		Setup: writeDB, Sentinels: []string{"{work}/bench.db"}, Needs: "sqlite3",
	},
	"libreoffice": {
		Name: "libreoffice", Cmd: []string{"soffice", "--headless", "--norestore", "-env:UserInstallation=file://{work}/lo-profile",
			"--convert-to", "pdf", "--outdir", "{work}/out", "{work}/doc.txt"},
		Setup: writeDoc, Sentinels: []string{"{work}/doc.txt"}, Needs: "libreoffice-writer-nogui (apt-get install --no-install-recommends libreoffice-writer-nogui)",
	},
}

// DefaultPrograms is the order programs run in.
var DefaultPrograms = []string{"python3", "python3-system", "node", "gcc", "sqlite3", "libreoffice"}

// expand replaces {work} (and {py}: the pyenv python's stdlib) in s.
func expand(s, work string) string {
	s = strings.ReplaceAll(s, "{work}", work)
	if strings.Contains(s, "{py}") {
		s = strings.ReplaceAll(s, "{py}", pythonStdlib())
	}
	return s
}

// pythonStdlib is the stdlib directory of the python3 on PATH, asked once
// (at prepare, before any measurement: asking runs python3, which must
// not happen between a drop_caches and the launch it prepares).
var pythonStdlib = sync.OnceValue(func() string {
	out, err := exec.Command("python3", "-c", "import json, os; print(os.path.dirname(os.path.dirname(json.__file__)))").Output()
	if err != nil {
		return "/usr/lib/python3.11"
	}
	return strings.TrimSpace(string(out))
})

// available reports why p cannot run here, or nil.
func available(p Program) error {
	if _, err := exec.LookPath(p.Cmd[0]); err != nil {
		return fmt.Errorf("%s: %s not found; install %s", p.Name, p.Cmd[0], p.Needs)
	}
	return nil
}

func writeC(dir string) error {
	src := `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>
#include <sys/stat.h>
#include <pthread.h>

struct item { char name[32]; double v; };

static int cmp(const void *a, const void *b) {
	const struct item *x = a, *y = b;
	return (x->v > y->v) - (x->v < y->v);
}

int main(int argc, char **argv) {
	struct item it[64];
	for (int i = 0; i < 64; i++) {
		snprintf(it[i].name, sizeof it[i].name, "item-%d", i);
		it[i].v = sin(i) * 100;
	}
	qsort(it, 64, sizeof it[0], cmp);
	printf("%s %f %ld\n", it[0].name, it[0].v, (long)time(NULL));
	return argc > 5 ? errno : 0;
}
`
	return os.WriteFile(filepath.Join(dir, "prog.c"), []byte(src), 0o644)
}

// writeDB makes a 64 MiB-ish SQLite database with the Debian sqlite3 CLI:
// 200000 rows of 300 bytes.
func writeDB(dir string) error {
	db := filepath.Join(dir, "bench.db")
	if _, err := os.Stat(db); err == nil {
		return nil
	}
	sql := "create table t(k integer primary key, v text);" +
		"with recursive c(x) as (select 1 union all select x+1 from c limit 200000) " +
		"insert into t select x, printf('%0300d', x * 7919 % 1000003) from c;"
	out, err := exec.Command("sqlite3", db, sql).CombinedOutput()
	if err != nil {
		os.Remove(db)
		return fmt.Errorf("make %s: %v: %s", db, err, out)
	}
	return nil
}

func writeDoc(dir string) error {
	var b strings.Builder
	for i := range 400 {
		fmt.Fprintf(&b, "Paragraph %d. predictio prefetches what a program's launches read, from the exec on, in the order they read it.\n\n", i)
	}
	if err := os.MkdirAll(filepath.Join(dir, "out"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "doc.txt"), []byte(b.String()), 0o644)
}
