package main

func init() {
	c := &command{
		name:    "train",
		summary: "TODO summary",
		usage:   "predictio train [flags]",
		example: "predictio train -h",
	}
	c.run = notImplemented(c)
	register(c)
}
