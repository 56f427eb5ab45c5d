package redis

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// tlsSettings are the --redis.tls.* flags, and the CA bundle and client
// certificate read from their files once, at start (load).
type tlsSettings struct {
	caFile, certFile, keyFile, serverName string
	insecureSkipVerify                    bool
	roots                                 *x509.CertPool    // nil: the system roots
	certs                                 []tls.Certificate // the client certificate, if any
}

// load reads the files the settings name; every error names its flag.
func (t tlsSettings) load() (tlsSettings, error) {
	if t.caFile != "" {
		pem, err := os.ReadFile(t.caFile)
		if err != nil {
			return t, fmt.Errorf("--redis.tls.ca-file: %w", err) // the error names the path
		}
		t.roots = x509.NewCertPool()
		if !t.roots.AppendCertsFromPEM(pem) {
			return t, fmt.Errorf("--redis.tls.ca-file %s: no PEM certificates", t.caFile)
		}
	}
	switch {
	case t.certFile == "" && t.keyFile == "":
	case t.keyFile == "":
		return t, errors.New("--redis.tls.key-file is needed with --redis.tls.cert-file")
	case t.certFile == "":
		return t, errors.New("--redis.tls.cert-file is needed with --redis.tls.key-file")
	default:
		certPEM, err := os.ReadFile(t.certFile)
		if err != nil {
			return t, fmt.Errorf("--redis.tls.cert-file: %w", err)
		}
		keyPEM, err := os.ReadFile(t.keyFile)
		if err != nil {
			return t, fmt.Errorf("--redis.tls.key-file: %w", err)
		}
		// The error says whether the certificate or the key input is bad.
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return t, fmt.Errorf("--redis.tls.cert-file %s, --redis.tls.key-file %s: %w", t.certFile, t.keyFile, err)
		}
		t.certs = []tls.Certificate{cert}
	}
	return t, nil
}

// config returns the TLS configuration of a rediss:// target: base (from
// the URL) with the flags applied.
func (t tlsSettings) config(base *tls.Config) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		c = base.Clone()
	}
	if t.serverName != "" {
		c.ServerName = t.serverName
	}
	c.InsecureSkipVerify = c.InsecureSkipVerify || t.insecureSkipVerify // ?skip_verify=true or the flag
	if t.roots != nil {
		c.RootCAs = t.roots
	}
	if t.certs != nil {
		c.Certificates = t.certs
	}
	return c
}

var (
	// errTLSHandshake marks a handshake the TLS layer failed (a
	// certificate, an alert, a record that is not TLS), not the connection
	// under it (a timeout, a close, a reset), which keeps its own reason.
	errTLSHandshake  = errors.New("TLS handshake failed")
	errPlainTextPort = errors.New("tls: the port answers plain-text Redis (a PING on a second connection got a RESP reply), not TLS: use redis:// or the TLS port")
)

// keepAlive is go-redis' TCP keep-alive policy for its own dialer: probes
// after 30 s idle, 3 of them 5 s apart.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}

// tlsDialer returns the dialer of a rediss:// target: TCP, then the TLS
// handshake, both within timeout, as go-redis' own dialer does — and the
// answer to a plain-text port. A plain Redis takes the ClientHello for the
// start of an inline command and, since the ClientHello has a NUL byte
// before any newline, waits for its end forever: the handshake would end
// in a timeout, indistinguishable from a hung server. So when the server
// has sent nothing for a quarter of the timeout, a second connection sends
// "PING\r\n" in plain text (no credential: the handshake has not
// authenticated anything); a RESP reply (+PONG, -NOAUTH …) ends the dial
// with errPlainTextPort. A TLS server answers the ClientHello within
// milliseconds, and a hung one answers neither, so both keep their
// verdict.
func tlsDialer(timeout time.Duration, cfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		d := &net.Dialer{KeepAliveConfig: keepAlive}
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				c.ServerName = host
			}
		}
		counted := &readCounter{Conn: raw}
		conn := tls.Client(counted, c)
		hctx, stop := context.WithCancel(ctx)
		defer stop()
		var plain atomic.Bool
		check := time.AfterFunc(timeout/4, func() {
			if counted.n.Load() == 0 && answersPlainRESP(hctx, d, network, addr) {
				plain.Store(true)
				stop()
			}
		})
		err = conn.HandshakeContext(hctx)
		check.Stop()
		if err != nil {
			_ = raw.Close()
			if plain.Load() {
				return nil, errPlainTextPort
			}
			return nil, handshakeError(err)
		}
		return conn, nil
	}
}

// handshakeError wraps errTLSHandshake around an error of the TLS layer.
func handshakeError(err error) error {
	var netErr net.Error
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &netErr) && netErr.Timeout() {
		return err
	}
	return fmt.Errorf("%w: %w", errTLSHandshake, err)
}

// answersPlainRESP reports whether addr answers a plain-text PING with a
// RESP simple string or error line.
func answersPlainRESP(ctx context.Context, d *net.Dialer, network, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return false
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 128)
	n, _ := c.Read(buf)
	line := buf[:n]
	return n > 2 && (line[0] == '+' || line[0] == '-') && bytes.Contains(line, []byte("\r\n"))
}

type readCounter struct {
	net.Conn
	n atomic.Int64
}

func (r *readCounter) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.n.Add(int64(n))
	return n, err
}
