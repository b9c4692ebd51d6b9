package record

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/source"
)

// startProgress prints a progress line to w every second on a terminal
// (every 5 s otherwise) until stop is called; w nil prints nothing.
func startProgress(w io.Writer, start time.Time, src *source.Source) (stop func()) {
	if w == nil {
		return func() {}
	}
	tty := false
	if f, ok := w.(*os.File); ok {
		if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
			tty = true
		}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var last uint64
		lastT := start
		n := 0
		for {
			select {
			case <-quit:
				if tty {
					fmt.Fprint(w, "\r\033[K")
				}
				return
			case now := <-tick.C:
				n++
				st := src.Stats()
				rate := float64(st.Events-last) / now.Sub(lastT).Seconds()
				last, lastT = st.Events, now
				if !tty && n%5 != 0 {
					continue
				}
				line := fmt.Sprintf("record: %s events/s, %d events, %d dropped, %d files, %s elapsed",
					humanRate(rate), st.Events, st.Dropped, st.Files, now.Sub(start).Round(time.Second))
				if tty {
					fmt.Fprint(w, "\r\033[K"+line)
				} else {
					fmt.Fprintln(w, line)
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		wg.Wait()
	}
}

func humanRate(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 2, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "K"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
