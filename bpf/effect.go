package bpf

// effect.bpf.c is package effect's prefetch effect accounting: tp_btf
// programs on page-cache inserts and deletes (mm_filemap_add_to_page_cache,
// mm_filemap_delete_from_page_cache) and on system call entry and exit
// (sys_enter, sys_exit, filtered to the read family), and tracepoint
// programs on mm_filemap_fault and mm_filemap_map_pages. Needs Linux 5.17
// (bpf_loop) with BTF. Regenerate with `go generate ./bpf`;
// scripts/bpf-check.sh checks it for drift with the other programs.
//go:generate go tool bpf2go -tags linux -target amd64 -type file_key -type page_key -type pending_page -type file_counts Effect effect.bpf.c -- -I. -Wall -Werror
