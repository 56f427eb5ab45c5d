package fleet

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"
)

// samples are generated families of series, each series with one value per
// step from start, which write renders for promtool or VictoriaMetrics.
type samples struct {
	start time.Time
	step  time.Duration
	fams  map[string]*family
	order []string
	lag   map[string]time.Duration // families recorded this long after their step
	// digits are the significant digits written of each value (-1: all,
	// for values a test compares exactly; 6 keep a month of roll-ups small).
	digits int
}

// series is one generated series: its labels (without the name) and a
// value per step.
type series struct {
	labels string
	values []float64
}

// family is one metric name with all its series.
type family struct {
	name   string
	series []series
}

func newSamples(start time.Time, step time.Duration, digits int) samples {
	return samples{start: start, step: step, fams: map[string]*family{}, lag: map[string]time.Duration{}, digits: digits}
}

func (g *samples) add(name, labels string, values []float64) {
	f := g.fams[name]
	if f == nil {
		f = &family{name: name}
		g.fams[name] = f
		g.order = append(g.order, name)
	}
	f.series = append(f.series, series{labels, values})
}

// at returns the time of step k.
func (g *samples) at(k int) time.Time { return g.start.Add(time.Duration(k) * g.step) }

// write renders the families sorted by name as OpenMetrics (every family a
// gauge: promtool stores samples, not types), or with millis as Prometheus
// text with millisecond timestamps.
func (g *samples) write(w io.Writer, millis bool) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	names := append([]string(nil), g.order...)
	sort.Strings(names)
	for _, name := range names {
		f := g.fams[name]
		if !millis {
			fmt.Fprintf(bw, "# TYPE %s gauge\n", name)
		}
		for _, s := range f.series {
			prefix := name + "{" + s.labels + "} "
			for k, v := range s.values {
				bw.WriteString(prefix)
				bw.WriteString(strconv.FormatFloat(v, 'g', g.digits, 64))
				ts := g.at(k).Add(g.lag[name]).Unix()
				if millis {
					fmt.Fprintf(bw, " %d000\n", ts)
				} else {
					fmt.Fprintf(bw, " %d\n", ts)
				}
			}
		}
	}
	if !millis {
		bw.WriteString("# EOF\n")
	}
	return bw.Flush()
}
