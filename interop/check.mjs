// check.mjs reads predictio bundles and their Parquet exports with third-party
// readers and compares what they see with what predictio itself reports.
//
//   node interop/check.mjs PREDICTIO BUNDLE=PARQUET_DIR [BUNDLE=PARQUET_DIR ...]
//
// PREDICTIO is a built predictio binary; PARQUET_DIR holds the output of
// `predictio trace export BUNDLE --parquet PARQUET_DIR`. The reference comes
// from `predictio trace info --json` and `predictio trace cat --format jsonl`.
// Readers:
//   duckdb/parquet   DuckDB read_parquet on files, accesses, hints .parquet
//   polars/ipc       polars readIPC on the bundle's zstd Arrow IPC files
//   polars/parquet   polars readParquet on the .parquet files
// Each reader must report the same schema (column names, order and types),
// row counts, aggregates and first and last rows. Any mismatch or read error
// is printed and the process exits 1. scripts/interop-check.sh runs it.
//
// Format 1.0 bundles have the 1.0 columns; 1.1 bundles the 1.1 ones too.
// Parquet exports always carry kind_name (derived from kind for 1.0), and
// DuckDB must count `WHERE kind_name = 'read'` (and every other kind name)
// as predictio's own `trace info` does.
import { execFileSync } from "node:child_process";
import { readFileSync, existsSync } from "node:fs";
import path from "node:path";
import { isDeepStrictEqual } from "node:util";
import pl from "nodejs-polars";
import { DuckDBInstance } from "@duckdb/node-api";

const ACCESS_KINDS = {
  read: 1, fault: 2, map: 3, cache_add: 4, readahead_sync: 5, readahead_async: 6, cache_delete: 7, imported: 8,
  open: 9, stat: 10, readdir: 11, exec: 12, mmap: 13,
};
const HINT_KINDS = { tree_child_enter: 1, tensor_layout: 2, layer_start: 3, custom: 4 };

// Expected column types per table, as docs/format.md specifies them, in each
// reader's vocabulary. polars maps dictionary<int32, utf8> to Categorical.
// V11 lists the columns format 1.1 appends; KIND_NAME is the dictionary
// column that 1.1 tables and every Parquet export of accesses and hints have.
const SCHEMA = {
  files: [
    ["file_id", "UINTEGER", "UInt32"], ["dev", "UBIGINT", "UInt64"], ["ino", "UBIGINT", "UInt64"],
    ["path", "VARCHAR", "String"], ["size_bytes", "UBIGINT", "UInt64"], ["mtime_ns", "BIGINT", "Int64"],
  ],
  accesses: [
    ["ts_ns", "UBIGINT", "UInt64"], ["pid", "UINTEGER", "UInt32"], ["tid", "UINTEGER", "UInt32"],
    ["comm", "VARCHAR", "Categorical"], ["file_id", "UINTEGER", "UInt32"], ["first_page", "UBIGINT", "UInt64"],
    ["npages", "UINTEGER", "UInt32"], ["kind", "UTINYINT", "UInt8"],
  ],
  hints: [
    ["ts_ns", "UBIGINT", "UInt64"], ["pid", "UINTEGER", "UInt32"], ["kind", "UTINYINT", "UInt8"],
    ["file_id", "UINTEGER", "UInt32"], ["parent_page", "UBIGINT", "UInt64"], ["position", "UINTEGER", "UInt32"],
    ["children", "UBIGINT[]", "List(UInt64)"], ["name", "VARCHAR", "String"],
    ["offset_bytes", "UBIGINT", "UInt64"], ["length_bytes", "UBIGINT", "UInt64"],
  ],
};
const V11 = {
  files: [["mode", "UINTEGER", "UInt32"]],
  accesses: [
    ["end_ns", "UBIGINT", "UInt64"], ["op", "UBIGINT", "UInt64"], ["ret", "BIGINT", "Int64"], ["prot", "UTINYINT", "UInt8"],
    ["map_first_page", "UBIGINT", "UInt64"], ["map_pages", "UBIGINT", "UInt64"],
  ],
  hints: [["tid", "UINTEGER", "UInt32"], ["source", "VARCHAR", "Categorical"]],
};
const KIND_NAME = ["kind_name", "VARCHAR", "Categorical"];
// Format 1.2 appends these after kind_name.
const V12 = {
  files: [],
  accesses: [["tracer_ns", "UINTEGER", "UInt32"], ["tracer_calls", "UINTEGER", "UInt32"]],
  hints: [],
};

// columns returns the columns a reader must see in table: the bundle's
// (v11 is 0 for format 1.0, else 10 + the minor version) and, for a
// Parquet export, kind_name.
function columns(table, v11, parquet) {
  const cols = [...SCHEMA[table], ...(v11 ? V11[table] : [])];
  if (table !== "files" && (v11 || parquet)) cols.push(KIND_NAME);
  if (v11 >= 12) cols.push(...V12[table]);
  return cols;
}

// Numeric columns summed in every reader; kind names counted.
const SUMS = {
  files: ["file_id", "dev", "ino", "size_bytes", "mtime_ns", "mode"],
  accesses: ["npages", "first_page", "file_id", "pid", "tid", "end_ns", "op", "ret", "prot", "map_first_page", "map_pages", "tracer_ns", "tracer_calls"],
  hints: ["position", "parent_page", "offset_bytes", "length_bytes", "file_id", "tid"],
};
const KIND_NAMES = { accesses: Object.keys(ACCESS_KINDS), hints: Object.keys(HINT_KINDS) };
const TABLES = Object.keys(SCHEMA);
const STRING_COLS = new Set(["path", "comm", "name", "source", "kind_name"]);

// ---- reference: predictio's own view ----

function predictio(bin, args) {
  try {
    return execFileSync(bin, args, { maxBuffer: 1 << 30, encoding: "utf8" });
  } catch (e) {
    throw new Error(`run ${bin} ${args.join(" ")}: ${e.stderr || e.message}`);
  }
}

// parseLine parses one JSON line, keeping integers of 16 or more digits exact
// (JSON.parse would round them to float64).
function parseLine(line) {
  return JSON.parse(line.replace(/([:,\[])(-?\d{16,})(?=[,\]}])/g, '$1"$2"'));
}

function kindNumber(table, name) {
  const m = table === "accesses" ? ACCESS_KINDS : HINT_KINDS;
  if (name in m) return String(m[name]);
  const g = /^(?:kind|hint)(\d+)$/.exec(name);
  if (!g) throw new Error(`reference: ${table}: unknown kind name ${JSON.stringify(name)}`);
  return g[1];
}

// normRow turns a row into {column: string | [string]} in the order of cols.
function normRow(table, row, cols) {
  const out = {};
  for (const [col] of cols) {
    const v = row[col];
    if (v === undefined) throw new Error(`${table}: row has no column ${col}`);
    if (col === "children") out[col] = Array.from(v, (x) => String(x));
    else if (STRING_COLS.has(col)) out[col] = String(v);
    else out[col] = String(v);
  }
  return out;
}

// Summary (all values strings, so every reader is compared exactly):
//   rows, sums and min/max of columns, counts per kind / comm, first and last rows.
function emptySummary(table) {
  return { table, rows: "0", agg: {}, groups: {}, first: null, last: null };
}

function referenceSummary(bin, bundle) {
  const info = JSON.parse(predictio(bin, ["trace", "info", "--json", bundle]));
  const v11 = info.format_version.startsWith("1.0.") ? 0 : 10 + Number(info.format_version.split(".")[1]);
  const out = { v11 };
  for (const table of TABLES) {
    const cols = columns(table, v11, false);
    const text = predictio(bin, ["trace", "cat", bundle, "--table", table, "--format", "jsonl"]);
    const kindNames = [];
    const rows = text.split("\n").filter((l) => l !== "").map((l) => {
      const r = parseLine(l);
      if (table !== "files") {
        r.kind_name = r.kind in (table === "accesses" ? ACCESS_KINDS : HINT_KINDS) ? r.kind : "undefined";
        kindNames.push(r.kind_name);
        r.kind = kindNumber(table, r.kind);
      }
      return normRow(table, r, cols);
    });
    const s = emptySummary(table);
    s.rows = String(rows.length);
    const big = (col) => rows.reduce((a, r) => a + BigInt(r[col]), 0n).toString();
    const minmax = (col) => {
      if (rows.length === 0) return ["null", "null"];
      let mn = BigInt(rows[0][col]), mx = mn;
      for (const r of rows) { const v = BigInt(r[col]); if (v < mn) mn = v; if (v > mx) mx = v; }
      return [mn.toString(), mx.toString()];
    };
    const count = (col) => {
      const m = {};
      for (const r of rows) m[r[col]] = (m[r[col]] || 0) + 1;
      return Object.fromEntries(Object.entries(m).map(([k, v]) => [k, String(v)]).sort());
    };
    for (const c of SUMS[table]) if (c in (rows[0] || Object.fromEntries(cols))) s.agg[`sum_${c}`] = big(c);
    if (table !== "files") {
      const [mn, mx] = minmax("ts_ns");
      s.agg.min_ts_ns = mn;
      s.agg.max_ts_ns = mx;
      // kind_name = 'read' etc., as predictio names each row's kind.
      for (const k of KIND_NAMES[table]) s.agg[`n_${k}`] = String(kindNames.filter((n) => n === k).length);
    }
    if (table === "files") {
      s.groups = { path: count("path") };
    } else if (table === "accesses") {
      s.groups = { kind: count("kind"), comm: count("comm") };
    } else {
      let withChildren = 0, nChildren = 0n, sumChildren = 0n;
      for (const r of rows) {
        if (r.children.length > 0) withChildren++;
        nChildren += BigInt(r.children.length);
        for (const c of r.children) sumChildren += BigInt(c);
      }
      Object.assign(s.agg, { with_children: String(withChildren), n_children: nChildren.toString(), sum_children: sumChildren.toString() });
      s.groups = { kind: count("kind"), name: count("name") };
    }
    s.first = rows.length ? rows[0] : null;
    s.last = rows.length ? rows[rows.length - 1] : null;
    out[table] = s;
  }
  // cat must agree with info (both are predictio; a disagreement means the
  // reference itself is wrong).
  const infoKinds = (m, table) => Object.fromEntries(Object.entries(m || {}).map(([k, v]) => [kindNumber(table, k), String(v)]).sort());
  const self = [
    ["events", String(info.events), out.accesses.rows],
    ["hints", String(info.hints), out.hints.rows],
    ["files", String(info.files), out.files.rows],
    ["pages", String(info.pages), out.accesses.agg.sum_npages],
    ["first_ts_ns", info.events ? String(info.first_ts_ns) : "null", out.accesses.agg.min_ts_ns],
    ["last_ts_ns", info.events ? String(info.last_ts_ns) : "null", out.accesses.agg.max_ts_ns],
    ["kinds", JSON.stringify(infoKinds(info.kinds, "accesses")), JSON.stringify(out.accesses.groups.kind)],
    ["hint_kinds", JSON.stringify(infoKinds(info.hint_kinds, "hints")), JSON.stringify(out.hints.groups.kind)],
    ["kinds.read", String((info.kinds || {}).read || 0), out.accesses.agg.n_read],
  ];
  const bad = self.filter(([, a, b]) => a !== b).map(([k, a, b]) => `info --json ${k}=${a} but cat gives ${b}`);
  if (bad.length) throw new Error(`reference for ${bundle} is inconsistent:\n  ${bad.join("\n  ")}`);
  return out;
}

// ---- DuckDB on Parquet ----

async function duckdbSummaries(conn, pqdir, v11) {
  const out = {};
  for (const table of TABLES) {
    const cols = columns(table, v11, true);
    const file = path.join(pqdir, `${table}.parquet`);
    if (!existsSync(file)) throw new Error(`${file}: missing (export wrote no ${table} table)`);
    const src = `read_parquet('${file.replace(/'/g, "''")}', file_row_number = true)`;
    const q = async (sql) => (await conn.runAndReadAll(sql)).getRowObjectsJson();
    const s = emptySummary(table);
    s.schema = (await q(`DESCRIBE SELECT * EXCLUDE (file_row_number) FROM ${src}`)).map((r) => [r.column_name, r.column_type]);
    s.rows = (await q(`SELECT count(*)::VARCHAR AS n FROM ${src}`))[0].n;
    const aggSQL = (exprs) => `SELECT ${Object.entries(exprs).map(([k, e]) => `coalesce((${e})::VARCHAR, 'null') AS ${k}`).join(", ")} FROM ${src}`;
    const sum = (c) => `coalesce(sum(${c}::HUGEINT), 0)`;
    const exprs = {};
    const have = new Set(cols.map(([c]) => c));
    for (const c of SUMS[table]) if (have.has(c)) exprs[`sum_${c}`] = sum(c);
    if (table !== "files") {
      exprs.min_ts_ns = "min(ts_ns)";
      exprs.max_ts_ns = "max(ts_ns)";
      for (const k of KIND_NAMES[table]) exprs[`n_${k}`] = `count(*) FILTER (WHERE kind_name = '${k}')`;
    }
    if (table === "hints") {
      Object.assign(exprs, {
        with_children: "count(*) FILTER (WHERE len(children) > 0)", n_children: sum("len(children)"),
        sum_children: "coalesce(sum((SELECT sum(c::HUGEINT) FROM unnest(children) AS t(c))), 0)",
      });
    }
    s.agg = (await q(aggSQL(exprs)))[0];
    const groupCols = table === "files" ? ["path"] : table === "accesses" ? ["kind", "comm"] : ["kind", "name"];
    for (const g of groupCols) {
      const rows = await q(`SELECT ${g}::VARCHAR AS k, count(*)::VARCHAR AS n FROM ${src} GROUP BY ${g}`);
      s.groups[g] = Object.fromEntries(rows.map((r) => [r.k, r.n]).sort());
    }
    const rowCols = columns(table, v11, false);
    const sel = rowCols.map(([c]) => (c === "children" ? `children::VARCHAR[] AS children` : `${c}::VARCHAR AS ${c}`)).join(", ");
    const first = await q(`SELECT ${sel} FROM ${src} ORDER BY file_row_number LIMIT 1`);
    const last = await q(`SELECT ${sel} FROM ${src} ORDER BY file_row_number DESC LIMIT 1`);
    s.first = first.length ? normRow(table, first[0], rowCols) : null;
    s.last = last.length ? normRow(table, last[0], rowCols) : null;
    out[table] = s;
  }
  return out;
}

// ---- polars on Arrow IPC and Parquet ----

// polarsType prints a dtype without the DataType(...) wrappers nodejs-polars
// adds: DataType(List(DataType(UInt64))) -> List(UInt64).
function polarsType(dt) {
  const s = String(dt);
  const n = (s.match(/DataType\(/g) || []).length;
  return s.replace(/DataType\(/g, "").slice(0, s.length - 9 * n - n);
}

function polarsSummary(table, df, v11, parquet) {
  const s = emptySummary(table);
  s.schema = df.columns.map((c, i) => [c, polarsType(df.dtypes[i])]);
  s.rows = String(df.height);
  const str = (e, name) => e.cast(pl.Utf8).alias(name);
  const has = new Set(df.columns);
  const exprs = {};
  // Sums in BigInt over the values as strings: exact, where polars' Int64
  // and UInt64 sums would overflow (mtime_ns of a few files).
  const bigSums = {};
  for (const c of SUMS[table]) {
    if (has.has(c)) bigSums[`sum_${c}`] = df.getColumn(c).cast(pl.Utf8).toArray().reduce((a, v) => a + BigInt(v), 0n).toString();
  }
  if (table !== "files") {
    exprs.min_ts_ns = pl.col("ts_ns").min();
    exprs.max_ts_ns = pl.col("ts_ns").max();
    if (has.has("kind_name")) {
      for (const k of KIND_NAMES[table]) exprs[`n_${k}`] = pl.col("kind_name").cast(pl.Utf8).eq(pl.lit(k)).cast(pl.UInt64).sum();
    }
  }
  if (table === "hints") {
    const len = pl.col("children").lst.lengths();
    Object.assign(exprs, {
      with_children: len.gt(0).cast(pl.UInt64).sum(), n_children: len.cast(pl.UInt64).sum(),
      sum_children: pl.col("children").lst.sum().cast(pl.UInt64).sum(),
    });
  }
  const agg = Object.keys(exprs).length ? df.select(...Object.entries(exprs).map(([k, e]) => str(e, k))).toRecords()[0] : {};
  s.agg = { ...bigSums, ...Object.fromEntries(Object.entries(agg).map(([k, v]) => [k, v === null ? "null" : v])) };
  if (table !== "files" && !has.has("kind_name")) {
    // A 1.0 table has no kind_name: name the kinds as the reference does.
    const names = table === "accesses" ? ACCESS_KINDS : HINT_KINDS;
    for (const k of KIND_NAMES[table]) s.agg[`n_${k}`] = String(df.filter(pl.col("kind").eq(pl.lit(names[k]))).height);
  }
  const groupCols = table === "files" ? ["path"] : table === "accesses" ? ["kind", "comm"] : ["kind", "name"];
  for (const g of groupCols) {
    const rows = df.lazy().groupBy(pl.col(g).cast(pl.Utf8).alias("k")).agg(pl.len().cast(pl.Utf8).alias("n")).collectSync().toRecords();
    s.groups[g] = Object.fromEntries(rows.map((r) => [r.k, r.n]).sort());
  }
  const rowCols = columns(table, v11, false);
  const rowOf = (part) => {
    const recs = part.select(...rowCols.map(([c]) => (c === "children" ? pl.col(c).cast(pl.List(pl.Utf8)) : pl.col(c).cast(pl.Utf8)))).toRecords();
    return recs.length ? normRow(table, recs[0], rowCols) : null;
  };
  s.first = rowOf(df.head(1));
  s.last = rowOf(df.tail(1));
  return s;
}

function polarsSummaries(dir, ext, v11) {
  const out = {};
  for (const table of TABLES) {
    const file = path.join(dir, `${table}.${ext}`);
    if (!existsSync(file)) throw new Error(`${file}: missing`);
    // nodejs-polars' readIPC treats a string without the .ipc extension as
    // inline data, so hand it the bytes.
    const df = ext === "arrow" ? pl.readIPC(readFileSync(file)) : pl.readParquet(file);
    out[table] = polarsSummary(table, df, v11, ext === "parquet");
  }
  return out;
}

// ---- comparison ----

function short(v) {
  const s = JSON.stringify(v);
  return s.length > 400 ? `${s.slice(0, 400)}...` : s;
}

function compare(label, want, got) {
  const problems = [];
  for (const table of TABLES) {
    const w = want[table], g = got[table];
    const col = label.startsWith("duckdb") ? 1 : 2;
    const wantSchema = columns(table, want.v11, label.endsWith("parquet")).map((c) => [c[0], c[col]]);
    if (!isDeepStrictEqual(g.schema, wantSchema)) {
      problems.push(`${table}: schema ${JSON.stringify(g.schema)}, want ${JSON.stringify(wantSchema)}`);
    }
    for (const key of ["rows", "agg", "groups", "first", "last"]) {
      if (!isDeepStrictEqual(g[key], w[key])) {
        problems.push(`${table}: ${key} = ${short(g[key])}, predictio says ${short(w[key])}`);
      }
    }
  }
  return problems;
}

async function main() {
  const [bin, ...cases] = process.argv.slice(2);
  if (!bin || cases.length === 0 || cases.some((c) => !c.includes("="))) {
    console.error("usage: node interop/check.mjs PREDICTIO BUNDLE=PARQUET_DIR ...");
    process.exit(2);
  }
  const instance = await DuckDBInstance.create(":memory:");
  const conn = await instance.connect();
  let failed = 0;
  for (const c of cases) {
    const i = c.lastIndexOf("=");
    const bundle = c.slice(0, i), pqdir = c.slice(i + 1);
    const want = referenceSummary(bin, bundle);
    const desc = `format ${want.v11 ? `1.${want.v11 - 10}` : "1.0"}, ${want.accesses.rows} accesses (${want.accesses.agg.n_read} kind_name = 'read'), ${want.hints.rows} hints (${want.hints.agg.with_children} with children), ${want.files.rows} files`;
    const readers = [
      ["duckdb/parquet", () => duckdbSummaries(conn, pqdir, want.v11)],
      ["polars/ipc", () => polarsSummaries(bundle, "arrow", want.v11)],
      ["polars/parquet", () => polarsSummaries(pqdir, "parquet", want.v11)],
    ];
    for (const [label, read] of readers) {
      let problems;
      try {
        problems = compare(label, want, await read());
      } catch (e) {
        problems = [`read failed: ${e.message}`];
      }
      if (problems.length) {
        failed++;
        console.log(`FAIL ${label} ${bundle}:`);
        for (const p of problems) console.log(`  ${p}`);
      } else {
        console.log(`ok   ${label.padEnd(15)} ${bundle}: ${desc}`);
      }
    }
  }
  conn.closeSync?.();
  if (failed) {
    console.log(`interop: ${failed} reader check(s) failed`);
    process.exit(1);
  }
}

main().catch((e) => {
  console.error(`interop: ${e.stack || e.message}`);
  process.exit(1);
});
