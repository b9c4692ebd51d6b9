package simulate

import (
	"encoding/xml"
	"fmt"
	"io"
)

// Result is one checked assertion.
type Result struct {
	Assertion
	Got float64
	OK  bool
	Err error
}

// CheckAll evaluates every assertion against r, in order.
func CheckAll(as []Assertion, r *Report) []Result {
	out := make([]Result, len(as))
	for i, a := range as {
		got, ok, err := a.Check(r)
		out[i] = Result{Assertion: a, Got: got, OK: ok && err == nil, Err: err}
	}
	return out
}

// Message describes a result for people: "tree.coverage>=0.8: got 0.42".
func (r Result) Message() string {
	if r.Err != nil {
		return r.Err.Error()
	}
	return fmt.Sprintf("%s: got %.6g", r.Expr, r.Got)
}

type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes a JUnit XML report named suite: one test case per
// assertion, and one passing case per policy carrying its metrics, so that
// CI systems show both.
func WriteJUnit(w io.Writer, suite string, r *Report, results []Result) error {
	s := junitSuite{Name: suite, Time: fmt.Sprintf("%.3f", float64(r.ElapsedNS)/1e9)}
	for _, res := range results {
		c := junitCase{Name: res.Expr, Classname: "predictio.simulate.assert"}
		if !res.OK {
			c.Failure = &junitFailure{Message: res.Message(), Text: res.Message()}
			s.Failures++
		}
		s.Cases = append(s.Cases, c)
	}
	for i := range r.Policies {
		st := &r.Policies[i]
		s.Cases = append(s.Cases, junitCase{
			Name:      st.Name,
			Classname: "predictio.simulate.policy",
			SystemOut: fmt.Sprintf("spec=%s coverage=%.4f accuracy=%.4f pages_used_in_time=%d pages_late=%d pages_wasted=%d io_amplification=%.4f stall_ns=%d wall_ns=%d speedup=%.4f",
				st.Spec, st.Coverage, st.Accuracy, st.Used, st.Late, st.Wasted, st.IOAmplification, st.StallNS, st.WallNS, st.Speedup),
		})
	}
	s.Tests = len(s.Cases)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(junitSuites{Suites: []junitSuite{s}}); err != nil {
		return fmt.Errorf("write junit report: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}
