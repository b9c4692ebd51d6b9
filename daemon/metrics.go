package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"

	"github.com/predictio/predictio/effect"
)

// The metrics are computed when scraped, from the counters the daemon,
// the loop, the backend, the source and the effect observer keep anyway:
// nothing is counted per event for them.
const ns = "predictio_daemon_"

var (
	mEvents      = prometheus.NewDesc(ns+"events_total", "Events dispatched, per policy (the events it was handed).", []string{"policy"}, nil)
	mRequests    = prometheus.NewDesc(ns+"requests_total", "Prefetch requests emitted, per policy.", []string{"policy"}, nil)
	mReqPages    = prometheus.NewDesc(ns+"requested_pages_total", "Pages named by the requests, per policy.", []string{"policy"}, nil)
	mEffect      = prometheus.NewDesc(ns+"pages_total", "Prefetched pages by effect (prefetched, used_in_time, late, wasted), per policy; a page counts for the policy whose request first named its file.", []string{"policy", "effect"}, nil)
	mProgEffect  = prometheus.NewDesc(ns+"program_pages_total", "Prefetched pages by effect, per program (the files its launch prefetch named first).", []string{"program", "effect"}, nil)
	mLaunches    = prometheus.NewDesc(ns+"program_launches_total", "Launches of a program, by what the daemon did (seen, learned, prefetched).", []string{"program", "action"}, nil)
	mProgEvents  = prometheus.NewDesc(ns+"program_events_total", "Events of a program's learned launches.", []string{"program"}, nil)
	mExecs       = prometheus.NewDesc(ns+"execs_total", "Execs seen on the machine, by outcome (followed, ignored, claimed_by_run).", []string{"outcome"}, nil)
	mBackend     = prometheus.NewDesc(ns+"backend_pages_total", "Pages through the backend: requested, submitted (read), cached (skipped, already cached), past_eof, refused.", []string{"state"}, nil)
	mDrops       = prometheus.NewDesc(ns+"drops_total", "Things dropped at a bound: ring events, backend requests (queue or in-flight), launch files (worker queue), requests for files without a path yet, profile saves.", []string{"what"}, nil)
	mProfiles    = prometheus.NewDesc(ns+"profiles", "Launch profiles kept.", nil, nil)
	mProfBytes   = prometheus.NewDesc(ns+"profile_bytes", "Bytes of the profiles, encoded.", nil, nil)
	mActive      = prometheus.NewDesc(ns+"active_launches", "Launches being learned or followed.", nil, nil)
	mCPU         = prometheus.NewDesc(ns+"cpu_seconds_total", "CPU time of the daemon process, user and system.", []string{"mode"}, nil)
	mHints       = prometheus.NewDesc(ns+"hints_total", "Hints received and rejected.", []string{"state"}, nil)
	mLaunchFiles = prometheus.NewDesc(ns+"launch_files_total", "Profile files of launch prefetches, by the outcome of their check (checked, changed, denied, error).", []string{"outcome"}, nil)
	mAdapter     = prometheus.NewDesc(ns+"adapter_events_total", "Events the structure adapters derived (tree, tensor).", []string{"kind"}, nil)
	mAdapterFile = prometheus.NewDesc(ns+"adapter_files_total", "Files the structure adapters recognized.", nil, nil)
	mFollowed    = prometheus.NewDesc(ns+"followed_programs", "Programs followed for the structure adapters.", nil, nil)
)

// collector is the daemon's prometheus.Collector.
type collector struct{ d *Daemon }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mEvents, mRequests, mReqPages, mEffect, mProgEffect, mLaunches, mProgEvents, mExecs,
		mBackend, mDrops, mProfiles, mProfBytes, mActive, mCPU, mHints, mLaunchFiles, mAdapter, mAdapterFile, mFollowed} {
		ch <- d
	}
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func effects(ch chan<- prometheus.Metric, d *prometheus.Desc, c effect.Counts, label string) {
	counter(ch, d, c.Prefetched, label, "prefetched")
	counter(ch, d, c.UsedInTime, label, "used_in_time")
	counter(ch, d, c.Late, label, "late")
	counter(ch, d, c.Wasted, label, "wasted")
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	ls := d.loop.Stats()
	for _, p := range ls.Policies {
		counter(ch, mEvents, p.Events, p.Name)
		counter(ch, mRequests, p.Requests, p.Name)
		counter(ch, mReqPages, p.Pages, p.Name)
	}
	if d.ob != nil {
		if e, err := d.loop.Effect(false); err == nil {
			for name, pc := range e.Policies {
				effects(ch, mEffect, pc, name)
			}
			for prog, pc := range e.Programs {
				if prog != "" {
					effects(ch, mProgEffect, pc, prog)
				}
			}
		}
	}
	bs := ls.Backend
	rep := d.loop.Backend().Stats()
	counter(ch, mBackend, bs.PagesRequested, "requested")
	counter(ch, mBackend, bs.PagesSubmitted, "submitted")
	counter(ch, mBackend, bs.PagesCached, "cached")
	counter(ch, mBackend, bs.PagesPastEOF, "past_eof")
	counter(ch, mBackend, uint64(rep.Rejected), "refused")
	src := d.src.Stats()
	counter(ch, mDrops, src.Dropped, "ring_events")
	counter(ch, mDrops, bs.Dropped, "backend_requests")
	counter(ch, mDrops, ls.Meta.Dropped, "launch_files")
	counter(ch, mDrops, ls.Unregistered, "requests_without_path")
	counter(ch, mDrops, d.execDrops.Load(), "execs")
	counter(ch, mHints, src.Hints, "received")
	counter(ch, mHints, src.HintRejects.Total(), "rejected")
	pf := ls.ProfileFiles
	counter(ch, mLaunchFiles, pf.Checked, "checked")
	counter(ch, mLaunchFiles, pf.Changed, "changed")
	counter(ch, mLaunchFiles, pf.Denied, "denied")
	counter(ch, mLaunchFiles, pf.Errors, "error")
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) == nil {
		ch <- prometheus.MustNewConstMetric(mCPU, prometheus.CounterValue, float64(ru.Utime.Nano())/1e9, "user")
		ch <- prometheus.MustNewConstMetric(mCPU, prometheus.CounterValue, float64(ru.Stime.Nano())/1e9, "system")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	counter(ch, mDrops, uint64(d.store.failures), "profile_saves")
	counter(ch, mExecs, d.st.execs-d.st.ignored-d.st.claimed, "followed")
	counter(ch, mExecs, d.st.ignored, "ignored")
	counter(ch, mExecs, d.st.claimed, "claimed_by_run")
	for prog, pc := range d.st.byProgram {
		counter(ch, mLaunches, pc.Launches, prog, "seen")
		counter(ch, mLaunches, pc.Learned, prog, "learned")
		counter(ch, mLaunches, pc.Prefetched, prog, "prefetched")
		counter(ch, mProgEvents, pc.Events, prog)
	}
	ch <- prometheus.MustNewConstMetric(mProfiles, prometheus.GaugeValue, float64(d.store.model.Len()))
	ch <- prometheus.MustNewConstMetric(mProfBytes, prometheus.GaugeValue, float64(d.store.totalBytes()))
	ch <- prometheus.MustNewConstMetric(mActive, prometheus.GaugeValue, float64(len(d.launches)))
	ch <- prometheus.MustNewConstMetric(mFollowed, prometheus.GaugeValue, float64(len(d.store.followed)))
	if d.stage != nil { // its counters change under d.mu (Consume)
		as := d.stage.Stats()
		counter(ch, mAdapter, as.TreeEvents, "tree")
		counter(ch, mAdapter, as.TensorEvents, "tensor")
		counter(ch, mAdapterFile, as.Recognized)
	}
}

// MetricsAddr is the metrics endpoint's address ("" when off): the
// configured one, with the port chosen when it was 0.
func (d *Daemon) MetricsAddr() string { return d.metricsAddr }

// serveMetrics serves the Prometheus text format on Config.Metrics
// (loopback only), at /metrics.
func (d *Daemon) serveMetrics() error {
	if d.cfg.Metrics == "" {
		return nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{d}, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", d.cfg.Metrics)
	if err != nil {
		return fmt.Errorf("open the metrics endpoint: %w", err)
	}
	d.metricsAddr = ln.Addr().String()
	d.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := d.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("metrics endpoint failed", "err", err)
		}
	}()
	return nil
}
