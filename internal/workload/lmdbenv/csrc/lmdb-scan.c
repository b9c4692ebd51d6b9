/* lmdb-scan: a range scan over an LMDB environment, the reader of the
 * LMDB workload. It opens ENV read-only (with MDB_NORDAHEAD when asked,
 * as LMDB users do for databases larger than memory), positions a cursor
 * at the first key >= START (MDB_SET_RANGE) and reads N entries in key
 * order, summing every byte of every value so each value's pages are
 * touched. It prints "entries bytes checksum" on one line.
 *
 * Build: cc -O2 -o lmdb-scan lmdb-scan.c -llmdb   (Debian: liblmdb-dev)
 * Usage: lmdb-scan [-nordahead] ENV START N
 */
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, int rc) {
	fprintf(stderr, "lmdb-scan: %s: %s\n", what, mdb_strerror(rc));
	return 1;
}

int main(int argc, char **argv) {
	unsigned int flags = MDB_RDONLY;
	int a = 1;
	if (a < argc && strcmp(argv[a], "-nordahead") == 0) {
		flags |= MDB_NORDAHEAD;
		a++;
	}
	if (argc - a != 3) {
		fprintf(stderr, "usage: lmdb-scan [-nordahead] ENV START N\n");
		return 2;
	}
	const char *dir = argv[a], *start = argv[a + 1];
	long n = atol(argv[a + 2]);
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_cursor *cur;
	int rc;
	if ((rc = mdb_env_create(&env)) != 0) return fail("mdb_env_create", rc);
	if ((rc = mdb_env_open(env, dir, flags, 0644)) != 0) return fail(dir, rc);
	if ((rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)) != 0) return fail("mdb_txn_begin", rc);
	if ((rc = mdb_dbi_open(txn, NULL, 0, &dbi)) != 0) return fail("mdb_dbi_open", rc);
	if ((rc = mdb_cursor_open(txn, dbi, &cur)) != 0) return fail("mdb_cursor_open", rc);
	MDB_val key = {strlen(start), (void *)start}, val;
	unsigned long long bytes = 0, sum = 0;
	long got = 0;
	MDB_cursor_op op = MDB_SET_RANGE;
	while (got < n && (rc = mdb_cursor_get(cur, &key, &val, op)) == 0) {
		const unsigned char *p = val.mv_data;
		for (size_t i = 0; i < val.mv_size; i++) sum += p[i];
		bytes += val.mv_size;
		got++;
		op = MDB_NEXT;
	}
	if (rc != 0 && rc != MDB_NOTFOUND) return fail("mdb_cursor_get", rc);
	printf("%ld %llu %llu\n", got, bytes, sum);
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	mdb_env_close(env);
	return 0;
}
