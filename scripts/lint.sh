#!/usr/bin/env bash
# lint.sh runs the static checks that CI fails on, each at a version pinned
# here and served by the Go module proxy:
#   - go mod tidy -diff: go.mod and go.sum are tidy;
#   - staticcheck: dead code, misuse of APIs, ...;
#   - govulncheck: known vulnerabilities that the code can reach, in the
#     modules it requires and in the Go standard library of the toolchain
#     that builds it, against the Go vulnerability database as of
#     VULNDB_VERSION (the golang.org/x/vulndb module, indexed locally: this
#     machine reaches no other copy of it).
# Bump a version by checking that the proxy serves it first:
#   go list -m -versions honnef.co/go/tools
#   go list -m -versions golang.org/x/vuln
#   go list -m golang.org/x/vulndb@latest
set -euo pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION=v0.8.2                         # honnef.co/go/tools
GOVULNCHECK_VERSION=v1.9.0                         # golang.org/x/vuln
VULNDB_VERSION=v0.0.0-20261105234957-e22db6528018 # golang.org/x/vulndb, 2026-11-05

echo "== go mod tidy -diff"
if ! go mod tidy -diff; then
	echo "lint: go.mod or go.sum is not tidy (diff above): run 'go mod tidy' and commit the result" >&2
	exit 1
fi

echo "== staticcheck $STATICCHECK_VERSION"
go run "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" ./...

# vulndb builds the v1 database (index/db.json, index/modules.json, ID/*.json)
# from the OSV files of the pinned golang.org/x/vulndb module, once per
# version, and prints its directory.
vulndb() {
	local db=${XDG_CACHE_HOME:-$HOME/.cache}/predictio/vulndb-$VULNDB_VERSION
	if [ ! -f "$db/index/modules.json" ]; then
		local tmp src
		tmp=$(mktemp -d)
		# Outside this module, so that go.mod and go.sum stay as they are.
		src=$(cd "$tmp" && go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
		if [ ! -d "$src/data/osv" ]; then
			echo "lint: golang.org/x/vulndb@$VULNDB_VERSION has no data/osv" >&2
			exit 1
		fi
		(cd "$tmp" && go run "golang.org/x/vulndb/cmd/indexdb@$VULNDB_VERSION" -vulns "$src/data/osv" -out "$tmp/db") >&2
		mkdir -p "$(dirname "$db")"
		rm -rf "$db"
		mv "$tmp/db" "$db"
		rm -rf "$tmp"
	fi
	echo "$db"
}

echo "== govulncheck $GOVULNCHECK_VERSION ($(go env GOVERSION), database golang.org/x/vulndb@$VULNDB_VERSION)"
db=$(vulndb)
go run "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION" -db "file://$db" ./...
