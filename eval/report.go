package eval

import (
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// WriteReport writes report.md, report.html and plots/ into dir from res.
// The HTML is self-contained: its plots are inline SVG.
func WriteReport(dir string, res *Results) error {
	pdir := filepath.Join(dir, "plots")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	doc, err := buildDoc(pdir, res)
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(dir, "report.md"), []byte(doc.markdown())); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, "report.html"), []byte(doc.html()))
}

// doc is the report's content, rendered as Markdown and as HTML.
type doc struct {
	title    string
	intro    []string
	sections []*section
}

type section struct {
	title string
	paras []string
	pairs []figPair
	table *table
}

// figPair is one of our figures beside the paper's.
type figPair struct {
	ours     *renderedFig
	paper    *PaperFigure
	paperFig *renderedFig
}

type renderedFig struct {
	name, title string
	svg         []byte
	missing     string // why there is no plot
}

type table struct {
	head []string
	rows [][]string
}

func buildDoc(pdir string, res *Results) (*doc, error) {
	d := &doc{title: "predictio eval report"}
	d.intro = introParas(res)
	d.sections = append(d.sections, summarySection(res), compareSection(res), deviceSection(res))
	for _, sr := range res.Suites {
		s, err := suiteSection(pdir, sr)
		if err != nil {
			return nil, err
		}
		d.sections = append(d.sections, s)
	}
	return d, nil
}

// noCommit says why a run's commit is unknown and what to do.
const noCommit = "the binary carries no VCS stamp and ran outside its clone: build it with go build -buildvcs=true"

func introParas(res *Results) []string {
	m := res.Machine
	commit := m.Commit
	if commit == "" {
		commit = "unknown (" + noCommit + ")"
	}
	if m.Dirty {
		commit += " (with uncommitted changes)"
	}
	mode := "full suites"
	if res.Quick {
		mode = "quick (reduced) suites, for CI: not the paper's sizes"
	}
	rounds := "each suite's default rounds"
	if res.Rounds > 0 {
		rounds = fmt.Sprintf("%d rounds per mode", res.Rounds)
	}
	return []string{
		fmt.Sprintf("Measured on %s: %s, %d CPUs, %.1f GiB of memory; Linux %s; %s; predictio commit %s.",
			orUnknown(m.Hostname), orUnknown(m.CPU), m.CPUs, float64(m.MemBytes)/(1<<30), orUnknown(m.Kernel), m.Go, commit),
		fmt.Sprintf("Device preset **%s**: %s. Runs: %s, %s, started %s, finished %s.",
			res.Device.Preset.Name, res.Device.Preset.Doc, mode, rounds, res.Started.Format(time.RFC3339), fmtTime(res.Finished)),
		"Every run of a workload starts cold: the workload's files are evicted (drop_caches and POSIX_FADV_DONTNEED) and their residency counted with cachestat before the run; a point says whether that was verified. " +
			"Modes alternate within each round and the first mode rotates between rounds. Values are medians with [min–max] over the rounds; results.json keeps every round. " +
			"The paper's figures are shown beside ours as the numbers its text publishes (its images are not part of this repository), redrawn where the text gives enough values.",
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "(unfinished)"
	}
	return t.Format(time.RFC3339)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func summarySection(res *Results) *section {
	t := &table{head: []string{"suite", "paper figures", "status", "points ok", "expected", "elapsed", "what it measures"}}
	for _, s := range res.Suites {
		ok := 0
		for _, p := range s.Points {
			if p.Status == StatusOK {
				ok++
			}
		}
		st := s.Status
		if s.Reason != "" {
			st += ": " + s.Reason
		}
		t.rows = append(t.rows, []string{s.Name, s.Figures, st, fmt.Sprintf("%d of %d", ok, len(s.Points)),
			fmtDur(time.Duration(s.ExpectedS * float64(time.Second))), fmtDur(time.Duration(s.ElapsedS * float64(time.Second))), s.Measures})
	}
	return &section{title: "Summary", table: t}
}

// compareSection is the table of our headline figures against the
// paper's, from each suite's Compare.
func compareSection(res *Results) *section {
	t := &table{head: []string{"suite", "figure", "what", "paper", "ours (median over rounds)"}}
	for _, sr := range res.Suites {
		su, ok := suites[sr.Name]
		if !ok || su.Info().Compare == nil {
			continue
		}
		for _, c := range su.Info().Compare(sr) {
			t.rows = append(t.rows, []string{sr.Name, sr.Figures, c.What, c.Paper, c.Ours})
		}
	}
	return &section{title: "Ours against the paper", table: t, paras: []string{
		"The paper's figures are from its testbed (Intel i9-11900K, NVMe SSD, Linux 6.6, desktop applications, Qwen models); ours are this machine's, with the workloads described in each suite. " +
			"A ratio below 1 is time saved against the same device's Baseline."}}
}

func deviceSection(res *Results) *section {
	s := &section{title: "Device", paras: []string{ThrottleNote}}
	t := &table{head: []string{"preset", "throttle", "disk", "QD1 4 KiB read, median", "QD32 4 KiB random reads", "sequential 1 MiB reads", "preset limits", "within the limits (+10%)"}}
	for _, dv := range append([]*DeviceInfo{&res.Device}, res.OtherDevices...) {
		row := []string{dv.Preset.Name, dv.Throttle, orUnknown(dv.Disk), "", "", "",
			limitStr(dv.Preset.ReadIOPS, "IOPS") + ", " + limitStr(dv.Preset.ReadBPS>>20, "MiB/s"), ""}
		if c := dv.Check; c != nil {
			row[3] = fmt.Sprintf("%.0f µs", c.QD1LatencyUS)
			row[4] = fmt.Sprintf("%.0f IOPS (%.1f MiB/s)", c.RandReadIOPS, c.RandReadMiBs)
			row[5] = fmt.Sprintf("%.1f MiB/s", c.SeqReadMiBs)
			row[7] = fmt.Sprint(c.WithinLimits)
		} else {
			row[3] = dv.CheckNote
		}
		t.rows = append(t.rows, row)
	}
	s.paras = append(s.paras, "Each preset was measured under its throttle with the code of `predictio bench device` (io_uring, O_DIRECT) before its first run.")
	s.table = t
	return s
}

func limitStr(v uint64, unit string) string {
	if v == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%d %s", v, unit)
}

func suiteSection(pdir string, sr *SuiteResult) (*section, error) {
	title := sr.Name
	if sr.Figures != "" {
		title += " (paper figure " + sr.Figures + ")"
	}
	s := &section{title: title}
	status := "Status: **" + sr.Status + "**"
	if sr.Reason != "" {
		status += ": " + sr.Reason
	}
	s.paras = append(s.paras, sr.Measures+".", "Needs: "+sr.Needs+".", status+".")
	s.paras = append(s.paras, sr.Notes...)
	info := Info{}
	if su, ok := suites[sr.Name]; ok {
		info = su.Info()
	}
	var ours []*Figure
	if info.Plots != nil && len(sr.Points) > 0 {
		ours = info.Plots(sr)
	}
	n := max(len(ours), len(info.Paper))
	for i := 0; i < n; i++ {
		var fp figPair
		if i < len(ours) {
			rf, err := renderFig(pdir, ours[i])
			if err != nil {
				return nil, err
			}
			fp.ours = rf
		}
		if i < len(info.Paper) {
			fp.paper = &info.Paper[i]
			if pf := info.Paper[i].Plot; pf != nil {
				rf, err := renderFig(pdir, pf)
				if err != nil {
					return nil, err
				}
				fp.paperFig = rf
			}
		}
		s.pairs = append(s.pairs, fp)
	}
	s.table = pointsTable(sr)
	return s, nil
}

func renderFig(pdir string, f *Figure) (*renderedFig, error) {
	rf := &renderedFig{name: f.Name, title: f.Title}
	if f.empty() {
		rf.missing = "no measured values to plot"
		return rf, nil
	}
	svg, err := writeFigure(pdir, f)
	if err != nil {
		return nil, err
	}
	rf.svg = svg
	return rf, nil
}

// pointsTable lists every point and mode with every metric.
func pointsTable(sr *SuiteResult) *table {
	t := &table{head: []string{"point", "mode", "status", "rounds", "median [min–max]", "cold"}}
	for _, p := range sr.Points {
		for _, m := range p.Modes {
			st := m.Status
			if m.Reason != "" {
				st += ": " + m.Reason
			}
			cold := "n/a"
			if m.Cold != nil {
				cold = "verified"
				if !m.ColdVerified {
					cold = m.Cold.String()
				}
			} else if p.Cold != "" && m.Rounds > 0 {
				cold = p.Cold
			}
			t.rows = append(t.rows, []string{p.ID, m.Mode, st, fmt.Sprint(m.Rounds), metricsCell(m), cold})
		}
		if len(p.Modes) == 0 {
			t.rows = append(t.rows, []string{p.ID, "", p.Status + ": " + p.Reason, "0", "", p.Cold})
		}
	}
	return t
}

func metricsCell(m *ModeResult) string {
	keys := make([]string, 0, len(m.Metrics))
	for k := range m.Metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		s := m.Metrics[k]
		parts = append(parts, fmt.Sprintf("%s %s [%s–%s]", k, num(s.Median), num(s.Min), num(s.Max)))
	}
	return strings.Join(parts, "; ")
}

// num formats a value with 4 significant digits.
func num(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.4g", v)
}

func (d *doc) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", d.title)
	for _, p := range d.intro {
		fmt.Fprintf(&b, "%s\n\n", p)
	}
	for _, s := range d.sections {
		fmt.Fprintf(&b, "## %s\n\n", s.title)
		for _, p := range s.paras {
			fmt.Fprintf(&b, "%s\n\n", p)
		}
		for _, fp := range s.pairs {
			mdPair(&b, fp)
		}
		if s.table != nil && len(s.table.rows) > 0 {
			mdTable(&b, s.table)
		}
	}
	return b.String()
}

func mdPair(b *strings.Builder, fp figPair) {
	if f := fp.ours; f != nil {
		if f.missing != "" {
			fmt.Fprintf(b, "*%s: %s.*\n\n", f.title, f.missing)
		} else {
			fmt.Fprintf(b, "![%s](plots/%s.png)\n\n", f.title, f.name)
		}
	}
	if p := fp.paper; p != nil {
		fmt.Fprintf(b, "**Paper, figure %s** (%s): %s\n\n", p.Figure, p.Caption, strings.Join(p.Values, "; "))
		if fp.paperFig != nil && fp.paperFig.missing == "" {
			fmt.Fprintf(b, "![paper figure %s, redrawn from its text](plots/%s.png)\n\n", p.Figure, fp.paperFig.name)
		}
	}
}

func mdTable(b *strings.Builder, t *table) {
	esc := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ") }
	fmt.Fprintf(b, "| %s |\n|", strings.Join(t.head, " | "))
	for range t.head {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = esc(c)
		}
		fmt.Fprintf(b, "| %s |\n", strings.Join(cells, " | "))
	}
	b.WriteString("\n")
}

const htmlStyle = `body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
h1{border-bottom:2px solid #444}h2{margin-top:2em;border-bottom:1px solid #aaa}
table{border-collapse:collapse;font-size:90%;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left}
th{background:#eee}.pair{display:flex;gap:1.5em;flex-wrap:wrap;align-items:flex-start;margin:1em 0}
.fig{flex:1 1 520px;min-width:320px}.fig svg{width:100%;height:auto}.paper{background:#f7f7f2;border:1px solid #ddd;padding:.5em 1em}
.missing{color:#a33;font-style:italic}.label{font-weight:bold;margin-bottom:.3em}`

func (d *doc) html() string {
	var b strings.Builder
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%s</title><style>%s</style></head><body>\n", html.EscapeString(d.title), htmlStyle)
	fmt.Fprintf(&b, "<h1>%s</h1>\n", html.EscapeString(d.title))
	for _, p := range d.intro {
		fmt.Fprintf(&b, "<p>%s</p>\n", inlineHTML(p))
	}
	for _, s := range d.sections {
		fmt.Fprintf(&b, "<h2>%s</h2>\n", html.EscapeString(s.title))
		for _, p := range s.paras {
			fmt.Fprintf(&b, "<p>%s</p>\n", inlineHTML(p))
		}
		for _, fp := range s.pairs {
			htmlPair(&b, fp)
		}
		if s.table != nil && len(s.table.rows) > 0 {
			htmlTable(&b, s.table)
		}
	}
	b.WriteString("</body></html>\n")
	return b.String()
}

func htmlPair(b *strings.Builder, fp figPair) {
	b.WriteString("<div class=\"pair\">\n<div class=\"fig\"><div class=\"label\">ours</div>")
	switch f := fp.ours; {
	case f == nil:
		b.WriteString("<p class=\"missing\">no figure</p>")
	case f.missing != "":
		fmt.Fprintf(b, "<p class=\"missing\">%s: %s</p>", html.EscapeString(f.title), html.EscapeString(f.missing))
	default:
		b.Write(stripXMLHeader(f.svg))
	}
	b.WriteString("</div>\n")
	if p := fp.paper; p != nil {
		fmt.Fprintf(b, "<div class=\"fig paper\"><div class=\"label\">paper, figure %s: %s</div>", html.EscapeString(p.Figure), html.EscapeString(p.Caption))
		if fp.paperFig != nil && fp.paperFig.missing == "" {
			b.Write(stripXMLHeader(fp.paperFig.svg))
			b.WriteString("<p><i>redrawn from the values its text publishes</i></p>")
		}
		b.WriteString("<ul>")
		for _, v := range p.Values {
			fmt.Fprintf(b, "<li>%s</li>", html.EscapeString(v))
		}
		b.WriteString("</ul></div>\n")
	}
	b.WriteString("</div>\n")
}

func stripXMLHeader(svg []byte) []byte {
	s := string(svg)
	if i := strings.Index(s, "<svg"); i > 0 {
		s = s[i:]
	}
	return []byte(s)
}

func htmlTable(b *strings.Builder, t *table) {
	b.WriteString("<table><tr>")
	for _, h := range t.head {
		fmt.Fprintf(b, "<th>%s</th>", html.EscapeString(h))
	}
	b.WriteString("</tr>\n")
	for _, r := range t.rows {
		b.WriteString("<tr>")
		for _, c := range r {
			fmt.Fprintf(b, "<td>%s</td>", strings.ReplaceAll(inlineHTML(c), "; ", "<br>"))
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n")
}

// inlineHTML escapes s and turns **bold** into <b> and `code` into
// <code>.
func inlineHTML(s string) string {
	e := html.EscapeString(s)
	for {
		i := strings.Index(e, "`")
		if i < 0 {
			break
		}
		j := strings.Index(e[i+1:], "`")
		if j < 0 {
			break
		}
		e = e[:i] + "<code>" + e[i+1:i+1+j] + "</code>" + e[i+2+j:]
	}
	for {
		i := strings.Index(e, "**")
		if i < 0 {
			return e
		}
		j := strings.Index(e[i+2:], "**")
		if j < 0 {
			return e
		}
		e = e[:i] + "<b>" + e[i+2:i+2+j] + "</b>" + e[i+4+j:]
	}
}
