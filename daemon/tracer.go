package daemon

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/predictio/predictio/source"
)

// tracer attaches the source's access programs while launches are learned
// and detaches them once none has been for pauseAfter (source.Pause,
// Resume). Detaching waits for the kernel to let go of the programs,
// which can take milliseconds: it is done on the tracer's own goroutine,
// never while the daemon's lock is held; attaching is fast and done
// before the launch it is for is followed.
type tracer struct {
	src    *source.Source
	log    *slog.Logger
	mu     sync.Mutex // serializes Pause and Resume
	paused bool       // guarded by mu
	active atomic.Int64
	timer  *time.Timer
	tmu    sync.Mutex // guards timer
	done   atomic.Bool
}

// pauseAfter is how long tracing stays attached after the last launch:
// launches come in bursts (a build, a shell script).
const pauseAfter = time.Second

func newTracer(src *source.Source, log *slog.Logger) *tracer {
	return &tracer{src: src, log: log, paused: true}
}

// resume attaches the access programs if they are not.
func (t *tracer) resume() error {
	t.cancel()
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.paused {
		return nil
	}
	if err := t.src.Resume(); err != nil {
		return err
	}
	t.paused = false
	return nil
}

// cancel cancels a scheduled detach.
func (t *tracer) cancel() {
	t.tmu.Lock()
	defer t.tmu.Unlock()
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
}

// idle schedules the detach: no launch is learned now.
func (t *tracer) idle() {
	t.tmu.Lock()
	defer t.tmu.Unlock()
	if t.timer != nil || t.done.Load() {
		return
	}
	t.timer = time.AfterFunc(pauseAfter, t.pauseIfIdle)
}

func (t *tracer) pauseIfIdle() {
	t.tmu.Lock()
	t.timer = nil
	t.tmu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.paused || t.active.Load() > 0 || t.done.Load() {
		return
	}
	if err := t.src.Pause(); err != nil {
		t.log.Warn("cannot pause tracing", "err", err)
		return
	}
	t.paused = true
}

// stop cancels a scheduled detach and waits for one under way (the
// source is being closed).
func (t *tracer) stop() {
	t.cancel()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done.Store(true)
}
