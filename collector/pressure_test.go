package collector

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParsePSI(t *testing.T) {
	for _, c := range []struct {
		name, data string
		want       PSI
		bad        bool
	}{
		{"some and full", "some avg10=2.04 avg60=1.12 avg300=0.80 total=912341234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
			PSI{Some: 912341234, HasSome: true, HasFull: true}, false},
		{"irq: full only", "full avg10=0.01 avg60=0.00 avg300=0.00 total=41234123\n", PSI{Full: 41234123, HasFull: true}, false},
		{"a future line kind", "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\npeak value=3\n", PSI{Some: 5, HasSome: true}, false},
		{"empty", "", PSI{}, false},
		{"bad average", "some avg10=x avg60=0 avg300=0 total=1\n", PSI{}, true},
		{"negative total", "some avg10=0.00 avg60=0.00 avg300=0.00 total=-1\n", PSI{}, true},
		{"no total", "some avg10=0.00 avg60=0.00 avg300=0.00\n", PSI{}, true},
		{"extra field", "some avg10=0.00 avg60=0.00 avg300=0.00 total=1 x=2\n", PSI{}, true},
		{"dot at the end", "some avg10=1. avg60=0.00 avg300=0.00 total=1\n", PSI{}, true},
	} {
		got, err := ParsePSI([]byte(c.data))
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v, error %v", c.name, got, err, c.want, c.bad)
		}
	}
}

// TestParsePSIReal: this machine's /proc/pressure files parse, without
// allocating.
func TestParsePSIReal(t *testing.T) {
	files, _ := filepath.Glob("/proc/pressure/*")
	files = append(files, "fixtures/linux-6.8/proc/pressure/io")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // psi=0: EOPNOTSUPP
		}
		st, err := ParsePSI(data)
		if err != nil || !st.HasSome && !st.HasFull {
			t.Errorf("%s: %+v, %v", f, st, err)
		}
		if allocs := testing.AllocsPerRun(20, func() { ParsePSI(data) }); allocs != 0 {
			t.Errorf("%s: %v allocations per parse, want 0", f, allocs)
		}
	}
}

func FuzzParsePSI(f *testing.F) {
	f.Add([]byte("some avg10=2.04 avg60=1.12 avg300=0.80 total=912341234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
	f.Add([]byte("full avg10=.1 avg60=1.1.1 avg300= total=18446744073709551616\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParsePSI(data)
		if err != nil && st != (PSI{}) {
			t.Fatalf("an error with values: %+v", st)
		}
	})
}
