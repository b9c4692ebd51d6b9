package main

func init() {
	c := &command{
		name:    "bench",
		summary: "TODO summary",
		usage:   "predictio bench [flags]",
		example: "predictio bench -h",
	}
	c.run = notImplemented(c)
	register(c)
}
