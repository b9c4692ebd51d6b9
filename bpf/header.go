package bpf

import _ "embed"

// RecordHeader is record.h as the programs were compiled with it, for
// checks of the constants bpf2go does not export (#defines), such as the
// loader's QUERY_EVERY.
//
//go:embed record.h
var RecordHeader string
