package main

func init() {
	c := &command{
		name:    "replay",
		summary: "TODO summary",
		usage:   "predictio replay [flags]",
		example: "predictio replay -h",
	}
	c.run = notImplemented(c)
	register(c)
}
