package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAcceptsGzip: Accept-Encoding as RFC 9110 reads it, including the
// forms the first parser misread (case, a q after another parameter, *
// beside a refused gzip, a second header field).
func TestAcceptsGzip(t *testing.T) {
	for _, tc := range []struct {
		fields []string
		want   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{"gzip"}, true},
		{[]string{"GZIP"}, true},
		{[]string{"x-gzip"}, true},
		{[]string{"identity"}, false},
		{[]string{"br"}, false},
		{[]string{"br, gzip;q=0.5"}, true},
		{[]string{"identity;q=0.5, gzip"}, true},
		{[]string{"gzip;q=0"}, false},
		{[]string{"gzip; q=0.0"}, false},
		{[]string{"gzip;Q=0"}, false},
		{[]string{"gzip;level=1;q=0"}, false},
		{[]string{"gzip;level=1;q=0.3"}, true},
		{[]string{"gzip;q=abc"}, false},
		{[]string{"gzip;q=-1, *"}, false},
		{[]string{"gzip;q=NaN, *"}, false},
		{[]string{"gzip;q="}, false},
		{[]string{"*"}, true},
		{[]string{"*;q=0"}, false},
		{[]string{"gzip;q=0, *"}, false},
		{[]string{"*;q=0, gzip"}, true},
		{[]string{"br", "gzip"}, true},
		{[]string{"gzip", "gzip;q=0"}, true}, // the highest weight named
	} {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		for _, f := range tc.fields {
			r.Header.Add("Accept-Encoding", f)
		}
		if got := acceptsGzip(r); got != tc.want {
			t.Errorf("Accept-Encoding %q: acceptsGzip = %v, want %v", tc.fields, got, tc.want)
		}
	}
}

// FuzzAcceptsGzip: any header value is read without panic; gzip is chosen
// only when named or under *; a header that ends by naming gzip accepts it,
// and one that refuses gzip without naming it elsewhere does not.
func FuzzAcceptsGzip(f *testing.F) {
	for _, s := range []string{"gzip", "br, gzip;q=0.5", "*;q=0", "gzip;level=1;q=0", "GZIP;Q=0.001", "x-gzip, *"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		accepts := func(v string) bool {
			r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			r.Header.Set("Accept-Encoding", v)
			return acceptsGzip(r)
		}
		lower := strings.ToLower(header)
		if accepts(header) && !strings.Contains(lower, "gzip") && !strings.Contains(header, "*") {
			t.Errorf("%q: gzip accepted, but neither gzip nor * is named", header)
		}
		if !accepts(header + ", gzip") {
			t.Errorf("%q + gzip: gzip refused", header)
		}
		if !strings.Contains(lower, "gzip") && accepts(header+", gzip;q=0") {
			t.Errorf("%q + gzip;q=0: gzip accepted", header)
		}
	})
}
