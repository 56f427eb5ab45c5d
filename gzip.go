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

// acceptsGzip reports whether the request's Accept-Encoding names gzip
// (or *) with a q-value above 0; Prometheus sends "gzip".
func acceptsGzip(r *http.Request) bool {
	for part := range strings.SplitSeq(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(part, ";")
		if c := strings.TrimSpace(coding); c != "gzip" && c != "*" {
			continue
		}
		q, ok := strings.CutPrefix(strings.TrimSpace(params), "q=")
		if v, err := strconv.ParseFloat(q, 64); !ok || err == nil && v > 0 {
			return true
		}
	}
	return false
}
