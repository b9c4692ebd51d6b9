// Package harness holds the measurement primitives shared by predictio's
// end-to-end measurements (predictio eval, the launch and workload
// benchmarks): cold page caches that are verified rather than assumed,
// device throttling with cgroup blkio (v1) or io.max (v2), summaries of
// repeated rounds, and the facts of the machine a figure was measured on.
package harness
