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
import { execFileSync } from "node:child_process";
import { readFileSync, existsSync } from "node:fs";
import path from "node:path";
import { isDeepStrictEqual } from "node:util";
import pl from "nodejs-polars";
import { DuckDBInstance } from "@duckdb/node-api";

const ACCESS_KINDS = { read: 1, fault: 2, map: 3, cache_add: 4, readahead_sync: 5, readahead_async: 6, cache_delete: 7, imported: 8 };
const HINT_KINDS = { tree_child_enter: 1, tensor_layout: 2, layer_start: 3, custom: 4 };

// Expected column types per table, as docs/format.md specifies them, in each
// reader's vocabulary. polars maps dictionary<int32, utf8> to Categorical.
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
const TABLES = Object.keys(SCHEMA);
const STRING_COLS = new Set(["path", "comm", "name"]);

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

// normRow turns a row into {column: string | [string]} in schema order.
function normRow(table, row) {
  const out = {};
  for (const [col] of SCHEMA[table]) {
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
  const sums = {};
  const out = {};
  for (const table of TABLES) {
    const text = predictio(bin, ["trace", "cat", bundle, "--table", table, "--format", "jsonl"]);
    const rows = text.split("\n").filter((l) => l !== "").map((l) => {
      const r = parseLine(l);
      if (table !== "files") r.kind = kindNumber(table, r.kind);
      return normRow(table, r);
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
    if (table === "files") {
      s.agg = { sum_file_id: big("file_id"), sum_dev: big("dev"), sum_ino: big("ino"), sum_size_bytes: big("size_bytes"), sum_mtime_ns: big("mtime_ns") };
      s.groups = { path: count("path") };
    } else if (table === "accesses") {
      const [mn, mx] = minmax("ts_ns");
      s.agg = { sum_npages: big("npages"), min_ts_ns: mn, max_ts_ns: mx, sum_first_page: big("first_page"), sum_file_id: big("file_id"), sum_pid: big("pid"), sum_tid: big("tid") };
      s.groups = { kind: count("kind"), comm: count("comm") };
    } else {
      const [mn, mx] = minmax("ts_ns");
      let withChildren = 0, nChildren = 0n, sumChildren = 0n;
      for (const r of rows) {
        if (r.children.length > 0) withChildren++;
        nChildren += BigInt(r.children.length);
        for (const c of r.children) sumChildren += BigInt(c);
      }
      s.agg = {
        min_ts_ns: mn, max_ts_ns: mx, with_children: String(withChildren), n_children: nChildren.toString(),
        sum_children: sumChildren.toString(), sum_position: big("position"), sum_parent_page: big("parent_page"),
        sum_offset_bytes: big("offset_bytes"), sum_length_bytes: big("length_bytes"), sum_file_id: big("file_id"),
      };
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
  ];
  const bad = self.filter(([, a, b]) => a !== b).map(([k, a, b]) => `info --json ${k}=${a} but cat gives ${b}`);
  if (bad.length) throw new Error(`reference for ${bundle} is inconsistent:\n  ${bad.join("\n  ")}`);
  return out;
}

// ---- DuckDB on Parquet ----

async function duckdbSummaries(conn, pqdir) {
  const out = {};
  for (const table of TABLES) {
    const file = path.join(pqdir, `${table}.parquet`);
    if (!existsSync(file)) throw new Error(`${file}: missing (export wrote no ${table} table)`);
    const src = `read_parquet('${file.replace(/'/g, "''")}', file_row_number = true)`;
    const q = async (sql) => (await conn.runAndReadAll(sql)).getRowObjectsJson();
    const s = emptySummary(table);
    s.schema = (await q(`DESCRIBE SELECT * EXCLUDE (file_row_number) FROM ${src}`)).map((r) => [r.column_name, r.column_type]);
    s.rows = (await q(`SELECT count(*)::VARCHAR AS n FROM ${src}`))[0].n;
    const aggSQL = (exprs) => `SELECT ${Object.entries(exprs).map(([k, e]) => `coalesce((${e})::VARCHAR, 'null') AS ${k}`).join(", ")} FROM ${src}`;
    const sum = (c) => `coalesce(sum(${c}::HUGEINT), 0)`;
    let exprs;
    if (table === "files") {
      exprs = { sum_file_id: sum("file_id"), sum_dev: sum("dev"), sum_ino: sum("ino"), sum_size_bytes: sum("size_bytes"), sum_mtime_ns: sum("mtime_ns") };
    } else if (table === "accesses") {
      exprs = { sum_npages: sum("npages"), min_ts_ns: "min(ts_ns)", max_ts_ns: "max(ts_ns)", sum_first_page: sum("first_page"), sum_file_id: sum("file_id"), sum_pid: sum("pid"), sum_tid: sum("tid") };
    } else {
      exprs = {
        min_ts_ns: "min(ts_ns)", max_ts_ns: "max(ts_ns)", with_children: "count(*) FILTER (WHERE len(children) > 0)",
        n_children: sum("len(children)"), sum_children: "coalesce(sum((SELECT sum(c::HUGEINT) FROM unnest(children) AS t(c))), 0)",
        sum_position: sum("position"), sum_parent_page: sum("parent_page"), sum_offset_bytes: sum("offset_bytes"),
        sum_length_bytes: sum("length_bytes"), sum_file_id: sum("file_id"),
      };
    }
    s.agg = (await q(aggSQL(exprs)))[0];
    const groupCols = table === "files" ? ["path"] : table === "accesses" ? ["kind", "comm"] : ["kind", "name"];
    for (const g of groupCols) {
      const rows = await q(`SELECT ${g}::VARCHAR AS k, count(*)::VARCHAR AS n FROM ${src} GROUP BY ${g}`);
      s.groups[g] = Object.fromEntries(rows.map((r) => [r.k, r.n]).sort());
    }
    const sel = SCHEMA[table].map(([c]) => (c === "children" ? `children::VARCHAR[] AS children` : `${c}::VARCHAR AS ${c}`)).join(", ");
    const first = await q(`SELECT ${sel} FROM ${src} ORDER BY file_row_number LIMIT 1`);
    const last = await q(`SELECT ${sel} FROM ${src} ORDER BY file_row_number DESC LIMIT 1`);
    s.first = first.length ? normRow(table, first[0]) : null;
    s.last = last.length ? normRow(table, last[0]) : null;
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

function polarsSummary(table, df) {
  const s = emptySummary(table);
  s.schema = df.columns.map((c, i) => [c, polarsType(df.dtypes[i])]);
  s.rows = String(df.height);
  const str = (e, name) => e.cast(pl.Utf8).alias(name);
  const sum = (c) => pl.col(c).cast(pl.UInt64).sum();
  const isum = (c) => pl.col(c).cast(pl.Int64).sum();
  let exprs;
  if (table === "files") {
    exprs = { sum_file_id: sum("file_id"), sum_dev: sum("dev"), sum_ino: sum("ino"), sum_size_bytes: sum("size_bytes"), sum_mtime_ns: isum("mtime_ns") };
  } else if (table === "accesses") {
    exprs = { sum_npages: sum("npages"), min_ts_ns: pl.col("ts_ns").min(), max_ts_ns: pl.col("ts_ns").max(), sum_first_page: sum("first_page"), sum_file_id: sum("file_id"), sum_pid: sum("pid"), sum_tid: sum("tid") };
  } else {
    const len = pl.col("children").lst.lengths();
    exprs = {
      min_ts_ns: pl.col("ts_ns").min(), max_ts_ns: pl.col("ts_ns").max(), with_children: len.gt(0).cast(pl.UInt64).sum(),
      n_children: len.cast(pl.UInt64).sum(), sum_children: pl.col("children").lst.sum().cast(pl.UInt64).sum(),
      sum_position: sum("position"), sum_parent_page: sum("parent_page"), sum_offset_bytes: sum("offset_bytes"),
      sum_length_bytes: sum("length_bytes"), sum_file_id: sum("file_id"),
    };
  }
  const agg = df.select(...Object.entries(exprs).map(([k, e]) => str(e, k))).toRecords()[0];
  s.agg = Object.fromEntries(Object.entries(agg).map(([k, v]) => [k, v === null ? "null" : v]));
  const groupCols = table === "files" ? ["path"] : table === "accesses" ? ["kind", "comm"] : ["kind", "name"];
  for (const g of groupCols) {
    const rows = df.lazy().groupBy(pl.col(g).cast(pl.Utf8).alias("k")).agg(pl.len().cast(pl.Utf8).alias("n")).collectSync().toRecords();
    s.groups[g] = Object.fromEntries(rows.map((r) => [r.k, r.n]).sort());
  }
  const rowOf = (part) => {
    const recs = part.select(...SCHEMA[table].map(([c]) => (c === "children" ? pl.col(c).cast(pl.List(pl.Utf8)) : pl.col(c).cast(pl.Utf8)))).toRecords();
    return recs.length ? normRow(table, recs[0]) : null;
  };
  s.first = rowOf(df.head(1));
  s.last = rowOf(df.tail(1));
  return s;
}

function polarsSummaries(dir, ext) {
  const out = {};
  for (const table of TABLES) {
    const file = path.join(dir, `${table}.${ext}`);
    if (!existsSync(file)) throw new Error(`${file}: missing`);
    // nodejs-polars' readIPC treats a string without the .ipc extension as
    // inline data, so hand it the bytes.
    const df = ext === "arrow" ? pl.readIPC(readFileSync(file)) : pl.readParquet(file);
    out[table] = polarsSummary(table, df);
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
    const wantSchema = SCHEMA[table].map((c) => [c[0], c[col]]);
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
    const desc = `${want.accesses.rows} accesses, ${want.hints.rows} hints (${want.hints.agg.with_children} with children), ${want.files.rows} files`;
    const readers = [
      ["duckdb/parquet", () => duckdbSummaries(conn, pqdir)],
      ["polars/ipc", () => polarsSummaries(bundle, "arrow")],
      ["polars/parquet", () => polarsSummaries(pqdir, "parquet")],
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
