package main

func init() {
	c := &command{
		name:    "simulate",
		summary: "TODO summary",
		usage:   "predictio simulate [flags]",
		example: "predictio simulate -h",
	}
	c.run = notImplemented(c)
	register(c)
}
