package uring

import (
	"errors"
	"sync"
	"testing"
)

// TestStatsDuringClose reads Stats, documented safe from any goroutine,
// while another goroutine closes the ring: Stats must not touch the rings
// after Close unmapped them (a SIGSEGV before Close took mapMu; the window
// is a few instructions, so this is a regression stress test, not a
// deterministic reproducer).
func TestStatsDuringClose(t *testing.T) {
	for i := 0; i < 50; i++ {
		r, err := New(8)
		if errors.Is(err, ErrNotSupported) {
			t.Skipf("kernel lacks io_uring: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					_ = r.Stats()
				}
			}
		}()
		for j := 0; j < 100; j++ {
			_ = r.Stats()
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
	}
}
