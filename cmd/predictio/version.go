package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/predictio/predictio/formats"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

func init() {
	c := &command{
		name:    "version",
		summary: "print the tool version, the bundle format version and the Go runtime",
		usage:   "predictio version",
		example: "predictio version",
	}
	c.run = func(args []string) int {
		fs := newFlagSet(c, c.name)
		if code, ok := parseFlags(fs, args); !ok {
			return code
		}
		v := version
		if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		fmt.Printf("predictio %s (bundle format %s, %s %s/%s)\n", v, formats.FormatVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	}
	register(c)
}
