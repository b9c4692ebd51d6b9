package main

func init() {
	c := &command{
		name:    "record",
		summary: "TODO summary",
		usage:   "predictio record [flags]",
		example: "predictio record -h",
	}
	c.run = notImplemented(c)
	register(c)
}
