package main

func init() {
	c := &command{
		name:    "trace",
		summary: "TODO summary",
		usage:   "predictio trace [flags]",
		example: "predictio trace -h",
	}
	c.run = notImplemented(c)
	register(c)
}
