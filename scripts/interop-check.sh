#!/usr/bin/env bash
# interop-check.sh checks that third-party readers open predictio's files:
# DuckDB reads the Parquet export, polars reads the zstd Arrow IPC tables and
# the Parquet export, and both must agree with `predictio trace info --json`
# and `predictio trace cat --format jsonl` on schema, row counts, aggregates
# and first/last rows (interop/check.mjs), and DuckDB must count the rows of
# each kind by name (`WHERE kind_name = 'read'`) as predictio does. Bundles
# checked: testdata/btree (format 1.0; hints with list<uint64> children),
# testdata/seq (1.0; two batches), testdata/launch (1.1: every access kind,
# service times, mappings, a path-only file), a merge of four testdata
# bundles (1.2 from 1.0 inputs, so with format 1.2's tracer_ns and
# tracer_calls columns, zero; several comm values and files) and a CSV
# import (1.2) whose comm dictionary grows across batches (delta
# dictionaries in the stream).
#
# Needs node >= 20 and npm; installs interop/node_modules with `npm ci` from
# the committed lockfile (needs registry.npmjs.org), and reuses it while
# interop/package-lock.json is unchanged. Exits 1 on any mismatch.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "interop-check: $*" >&2; exit 1; }

command -v node >/dev/null 2>&1 || die "node not found: install Node.js >= 20 with npm (Debian 12's own nodejs is 18; use the NodeSource nodejs package)"
command -v npm >/dev/null 2>&1 || die "npm not found: install npm (it ships with the NodeSource nodejs package)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || die "node $(node --version) is too old: need >= 20 (NodeSource nodejs package)"
command -v go >/dev/null 2>&1 || die "go not found: run scripts/setup.sh"

# Install the readers (DuckDB, polars) from the lockfile unless up to date.
lock_sum=$(sha256sum interop/package-lock.json | cut -d' ' -f1)
stamp=interop/node_modules/.predictio-lock.sha256
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$lock_sum" ]; then
	echo "interop: npm ci (interop/package-lock.json)"
	(cd interop && npm ci --no-audit --no-fund --loglevel=error) ||
		die "npm ci in interop/ failed: it needs registry.npmjs.org; see the npm error above"
	echo "$lock_sum" >"$stamp"
fi

work=$(mktemp -d /var/tmp/predictio-interop.XXXXXX)
trap 'rm -rf "$work"' EXIT
bin=$work/predictio
go build -o "$bin" ./cmd/predictio

# Extra bundles: several comm values, files and kinds; a comm dictionary that
# grows across batches.
"$bin" trace merge -o "$work/merged" testdata/btree testdata/seq testdata/fio-bundle testdata/msr-bundle >/dev/null
awk 'BEGIN { for (i = 0; i < 140000; i++)
	printf "%d,%d,%d,%s,%d\n", 1000 + i * 10, (i * 7919 % 100000) * 4096, 4096 * (1 + i % 3),
		(i < 70000 ? "alpha" : (i < 130000 ? "beta" : "gämma")), 100 + i % 5 }' >"$work/grow.csv"
"$bin" trace import --from csv --map ts=0,offset=1,size=2,comm=3,pid=4 --page-size 4096 \
	"$work/grow.csv" -o "$work/comm-grows" >/dev/null

cases=()
for b in testdata/btree testdata/seq testdata/launch "$work/merged" "$work/comm-grows"; do
	pq=$work/pq-$(basename "$b")
	"$bin" trace export "$b" --parquet "$pq" >/dev/null
	cases+=("$b=$pq")
done

node interop/check.mjs "$bin" "${cases[@]}"

# The check must be able to fail: a bundle paired with another's export.
if node interop/check.mjs "$bin" "testdata/btree=$work/pq-seq" >"$work/neg.out" 2>&1; then
	cat "$work/neg.out"
	die "self-test: testdata/btree compared with the export of testdata/seq passed; the check cannot fail"
fi
grep -q '^FAIL duckdb/parquet' "$work/neg.out" && grep -q '^FAIL polars/parquet' "$work/neg.out" ||
	{ cat "$work/neg.out"; die "self-test: mismatched export not reported by both readers"; }
echo "ok   self-test: a mismatched export fails the check"
