package main

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/klauspost/compress/gzip"
)

// Compression is ours, not promhttp's (its handlers are built with
// DisableCompression): promhttp compresses at gzip's default level with
// writers kept in a sync.Pool, which every garbage collection empties; a
// new writer is 0.8–1.2 MB to allocate and clear, more than compressing a
// scrape costs. The compressor is klauspost/compress's (the one Prometheus
// uses): at BestSpeed, with two writers kept between requests, it
// compresses a scrape without collectors in 0.5M instructions where the
// standard library's BestSpeed takes 0.8M, for a body within 2 % of that
// one's size (docs/benchmarks.md).
var gzipWriters = make(chan *gzip.Writer, 2)

// compressed serves r with h, its answer gzip-compressed when the request
// accepts gzip.
func compressed(h http.Handler, w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept-Encoding")
	if !acceptsGzip(r) {
		h.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Encoding", "gzip")
	gz := &gzipResponse{ResponseWriter: w}
	h.ServeHTTP(gz, r)
	gz.close()
}

// gzipResponse compresses the body with a writer it takes at the first
// Write, so that a request holds one only while its body is encoded, not
// while its collectors run.
type gzipResponse struct {
	http.ResponseWriter
	z *gzip.Writer
}

func (g *gzipResponse) Write(p []byte) (int, error) {
	if g.z == nil {
		select {
		case g.z = <-gzipWriters:
			g.z.Reset(g.ResponseWriter)
		default:
			g.z, _ = gzip.NewWriterLevel(g.ResponseWriter, gzip.BestSpeed)
		}
	}
	return g.z.Write(p)
}

// close ends the compressed body and keeps the writer for a later
// request.
func (g *gzipResponse) close() {
	if g.z == nil {
		_, _ = g.Write(nil) // an empty body is still a gzip stream
	}
	_ = g.z.Close()
	select {
	case gzipWriters <- g.z:
	default:
	}
}

// acceptsGzip reports whether r's Accept-Encoding accepts gzip, as RFC 9110
// (section 12.5.3) reads it: gzip (or its alias x-gzip) with a weight above
// 0, or, where gzip is not named, * with a weight above 0. Codings and the
// q parameter are case-insensitive, every Accept-Encoding field counts, and
// a weight that does not parse refuses. Prometheus sends "gzip".
func acceptsGzip(r *http.Request) bool {
	gzipQ, anyQ := -1.0, -1.0 // -1: not named
	for _, field := range r.Header.Values("Accept-Encoding") {
		for element := range strings.SplitSeq(field, ",") {
			coding, params, _ := strings.Cut(element, ";")
			switch c := strings.TrimSpace(coding); {
			case strings.EqualFold(c, "gzip"), strings.EqualFold(c, "x-gzip"):
				gzipQ = max(gzipQ, weight(params))
			case c == "*":
				anyQ = max(anyQ, weight(params))
			}
		}
	}
	if gzipQ >= 0 {
		return gzipQ > 0
	}
	return anyQ > 0
}

// weight is the q parameter among the parameters of an Accept-Encoding
// element ("q=0.5;x=y"): 1 without one, 0 when it is not a number of at
// least 0.
func weight(params string) float64 {
	for param := range strings.SplitSeq(params, ";") {
		name, value, _ := strings.Cut(param, "=")
		if strings.EqualFold(strings.TrimSpace(name), "q") {
			q, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil || !(q >= 0) { // NaN too
				return 0
			}
			return q
		}
	}
	return 1
}
