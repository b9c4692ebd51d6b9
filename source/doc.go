// Package source is predictio's eBPF event source, shared by record (events
// into a bundle), the live runtime (events to policies as they happen) and
// the daemon (system-wide exec watching, file accesses of the processes it
// picks).
//
// A Source attaches the programs of package bpf to the filemap, readahead,
// sched and sys_enter raw tracepoints (Linux 6.11+ for the read, fault and
// map kinds, 6.14+ for readahead; older kernels with kprobes get kprobe
// fallbacks on the functions those tracepoints sit in, see docs/record.md),
// follows its targets in the kernel (every task, a pid set that follows
// fork and exit, cgroup v2 subtrees; added and removed while running),
// resolves every (device, inode) to a path and a file id, and hands
// decoded batches to one Consumer:
//
//	src, err := source.Open(source.Config{Command: true, Latency: source.LowLatency})
//	...
//	defer src.Close()
//	src.Start(source.ConsumerFunc(func(b *source.Batch) error {
//		for i := range b.Accesses { ... b.Accesses[i].FileID ... }
//		return nil
//	}))
//	cmd := exec.Command("python3", "-c", "import json")
//	src.StartCommand(cmd)
//	cmd.Wait()
//	src.Stop()
//
// It needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), and CAP_SYS_ADMIN to
// mount tracefs or to run a command in a cgroup of its own. docs/source.md
// describes the API, the latency modes and their costs.
package source
