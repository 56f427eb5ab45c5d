package remoting

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/stall-exporter/stall_exporter/collector/remote"
)

// Options configure a Client. The zero value is usable.
type Options struct {
	// Timeout bounds one request (dial, write and read of the reply) when
	// the caller's context has no earlier deadline. Default 2s.
	Timeout time.Duration
	// MaxFrame is the largest reply frame accepted; DefaultMaxFrame when 0.
	MaxFrame int
	// Budget, when set, bounds the frame buffers this client and every
	// other client sharing it hold at once. A buffer is taken from it as
	// readFrame allocates it (each doubling gives back the buffer it
	// replaces), so a peer that announces a large frame and stalls holds
	// only what it made the client allocate; a complete frame of n bytes
	// holds n (1.5n while it grows) until the reply has been parsed.
	Budget *remote.Budget
	// OnBudget, when set, is called for each request that failed with remote.ErrBudget.
	OnBudget func()
	// Credentials, when set, sign every request (broker aclEnable=true).
	Credentials *Credentials
	// Dial opens the connection; net.Dialer's when nil.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Client talks to one broker or name server over one reused TCP connection.
// Requests are serialised on that connection; any transport or framing
// error closes it, as CloseIdle does, and the next request dials again. It
// is safe for concurrent use.
type Client struct {
	addr string
	opts Options

	sem    chan struct{} // one request at a time on the connection
	conn   net.Conn
	br     *bufio.Reader
	opaque int32
	closed atomic.Bool
}

// NewClient returns a client for addr (host:port). Nothing is dialled until
// the first request.
func NewClient(addr string, opts Options) *Client {
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	if opts.MaxFrame <= 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	if opts.Dial == nil {
		var d net.Dialer
		opts.Dial = d.DialContext
	}
	return &Client{addr: addr, opts: opts, sem: make(chan struct{}, 1)}
}

// ResponseError is a well-formed reply with a non-zero response code.
type ResponseError struct {
	Code int
	// Remark is the reply's error text, at most MaxRemark bytes: longer
	// ones are cut (at a rune boundary) and marked with "…" and their
	// length. It is the peer's text: Error quotes it.
	Remark string
}

// MaxRemark bounds the remark a ResponseError keeps. The peer chooses its
// length (up to the frame limit), and the error is logged and kept (the
// last error of each name server).
const MaxRemark = 256

func newResponseError(code int, remark string) *ResponseError {
	if len(remark) > MaxRemark {
		cut := MaxRemark
		for cut > 0 && !utf8.RuneStart(remark[cut]) {
			cut--
		}
		// A new string, so the frame's bytes are not kept alive.
		remark = fmt.Sprintf("%s… (%d bytes)", remark[:cut], len(remark))
	}
	return &ResponseError{Code: code, Remark: remark}
}

func (e *ResponseError) Error() string {
	name := map[int]string{SystemError: "SYSTEM_ERROR", SystemBusy: "SYSTEM_BUSY",
		RequestCodeNotSupported: "REQUEST_CODE_NOT_SUPPORTED", NoPermission: "NO_PERMISSION"}[e.Code]
	if name == "" {
		name = "code"
	}
	return fmt.Sprintf("remote error %s %d: %q", name, e.Code, e.Remark)
}

var ErrClosed = errors.New("remoting client closed")

// invoke sends a request with the given code, extra header fields and
// body, and returns the matching response (same opaque, response bit set)
// and what it holds of Options.Budget, which the caller gives back once
// done with the response. Frames that are server requests, and responses
// to other opaques, are dropped. A non-zero response code is returned as
// *ResponseError with the response; the connection stays open. The
// request is bounded by ctx and by Options.Timeout, whichever ends first.
func (c *Client) invoke(ctx context.Context, code int, ext map[string]string, body []byte) (*Command, *remote.Hold, error) {
	h := c.opts.Budget.NewHold()
	hold := &h
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, hold, ctx.Err()
	}
	defer func() { <-c.sem }()
	if c.closed.Load() {
		return nil, hold, ErrClosed
	}

	deadline := time.Now().Add(c.opts.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	reused := c.conn != nil
	resp, err := c.roundTrip(ctx, code, ext, body, deadline, hold)
	if err != nil && reused && staleConn(err) && ctx.Err() == nil && time.Now().Before(deadline) {
		// The idle connection was closed by the peer (a broker or name
		// server restart, an idle-timeout in between): the request never
		// reached a live server, and every request this client sends is a
		// read, so it is sent once more on a fresh connection.
		resp, err = c.roundTrip(ctx, code, ext, body, deadline, hold)
	}
	if errors.Is(err, remote.ErrBudget) && c.opts.OnBudget != nil {
		c.opts.OnBudget()
	}
	return resp, hold, err
}

// staleConn reports errors that mean the peer had closed a reused
// connection: EOF before any byte of a reply or a reset on read, a broken
// pipe or reset on write. A peer that closes inside a reply (IsBadReply)
// did answer, badly: that is not retried.
func staleConn(err error) bool {
	if IsBadReply(err) {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// roundTrip sends one request on the current connection, dialling one if
// there is none, and reads its response, its buffers taken from hold. Any
// transport error drops the connection.
func (c *Client) roundTrip(ctx context.Context, code int, ext map[string]string, body []byte, deadline time.Time, hold *remote.Hold) (*Command, error) {
	if c.conn == nil {
		dctx, cancel := context.WithDeadline(ctx, deadline)
		conn, err := c.opts.Dial(dctx, "tcp", c.addr)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", c.addr, err)
		}
		// A small read buffer: it only saves syscalls on small frames
		// (runtime info is about 3 KB); readFrame reads larger ones
		// straight into the frame's buffer. It lives as long as the
		// connection, one per cached broker.
		c.conn, c.br = conn, bufio.NewReaderSize(conn, connBuffer)
	}
	conn := c.conn
	if err := conn.SetDeadline(deadline); err != nil {
		c.drop()
		return nil, err
	}
	// Cancellation without a deadline: unblock the read at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			c.drop() // the deadline may have been cut short under a later request
		}
	}()

	c.opaque++
	if c.opaque <= 0 {
		c.opaque = 1
	}
	req := &Command{Code: code, Language: "GO", Opaque: c.opaque, ExtFields: ext, Body: body, Serialization: JSON}
	if cr := c.opts.Credentials; cr != nil {
		req.ExtFields = cr.Sign(ext, body)
	}
	frame, err := Encode(req)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(frame); err != nil {
		c.drop()
		return nil, c.ctxErr(ctx, fmt.Errorf("write to %s: %w", c.addr, err))
	}
	bctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	alloc := func(n, replaced int) error { return hold.Take(bctx, int64(n), int64(replaced)) }
	for {
		resp, err := readCommand(c.br, c.opts.MaxFrame, alloc)
		if err != nil {
			c.drop()
			hold.Release()
			if errors.Is(err, remote.ErrBudget) {
				return nil, fmt.Errorf("read from %s: %w", c.addr, err)
			}
			return nil, c.ctxErr(ctx, fmt.Errorf("read from %s: %w", c.addr, err))
		}
		if !resp.IsResponse() || resp.Opaque != req.Opaque {
			hold.Release() // not kept
			continue
		}
		if resp.Code != Success {
			return resp, newResponseError(resp.Code, resp.Remark)
		}
		return resp, nil
	}
}

func (c *Client) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err) //nolint:errorlint // the context is the cause; the read error it provoked is detail, not a reason to classify
	}
	return err
}

const connBuffer = 4 << 10 // a connection's read buffer

// CloseIdle closes the connection unless a request is using it, and reports
// whether it did (or there was none); the client stays usable and its next
// request dials again. /probe calls it for brokers probed long ago, so that
// an idle cached broker costs no socket.
func (c *Client) CloseIdle() bool {
	select {
	case c.sem <- struct{}{}:
	default:
		return false
	}
	defer func() { <-c.sem }()
	c.drop()
	return true
}

// drop closes the connection; the next request dials again.
func (c *Client) drop() {
	if c.conn != nil {
		c.conn.Close()
		c.conn, c.br = nil, nil
	}
}

// Close closes the connection; later requests fail with ErrClosed.
func (c *Client) Close() error {
	c.closed.Store(true)
	c.sem <- struct{}{}
	defer func() { <-c.sem }()
	c.drop()
	return nil
}

// RuntimeInfo sends GET_BROKER_RUNTIME_INFO (28) and decodes the KV table.
func (c *Client) RuntimeInfo(ctx context.Context) (map[string]string, error) {
	resp, hold, err := c.invoke(ctx, GetBrokerRuntimeInfo, nil, nil)
	defer hold.Release()
	if err != nil {
		return nil, err
	}
	return ParseKVTable(resp.Body)
}

// BrokerConfig sends GET_BROKER_CONFIG (26) and returns the settings and the
// number of lines that were not key=value.
func (c *Client) BrokerConfig(ctx context.Context) (map[string]string, int, error) {
	resp, hold, err := c.invoke(ctx, GetBrokerConfig, nil, nil)
	defer hold.Release()
	if err != nil {
		return nil, 0, err
	}
	cfg, bad := ParseConfig(resp.Body)
	return cfg, bad, nil
}

// ClusterInfo sends GET_BROKER_CLUSTER_INFO (106) to a name server.
func (c *Client) ClusterInfo(ctx context.Context) ([]BrokerAddr, error) {
	resp, hold, err := c.invoke(ctx, GetBrokerClusterInfo, nil, nil)
	defer hold.Release()
	if err != nil {
		return nil, err
	}
	return ParseClusterInfo(resp.Body)
}

// Credentials sign requests for brokers with aclEnable=true.
type Credentials struct {
	AccessKey     string
	SecretKey     string
	SecurityToken string // optional
}

// Sign returns a copy of ext with AccessKey, SecurityToken (when set) and
// Signature added. The signature is Base64(HMAC-SHA1(secretKey, the values of
// every extField except Signature, in key order, followed by the body)).
func (cr *Credentials) Sign(ext map[string]string, body []byte) map[string]string {
	out := make(map[string]string, len(ext)+3)
	for k, v := range ext {
		if k != "Signature" {
			out[k] = v
		}
	}
	out["AccessKey"] = cr.AccessKey
	if cr.SecurityToken != "" {
		out["SecurityToken"] = cr.SecurityToken
	}
	mac := hmac.New(sha1.New, []byte(cr.SecretKey))
	for _, k := range slices.Sorted(maps.Keys(out)) {
		mac.Write([]byte(out[k]))
	}
	mac.Write(body)
	out["Signature"] = base64.StdEncoding.EncodeToString(mac.Sum(nil))
	return out
}

// LoadCredentials reads an access key file: lines `accessKey=…`,
// `secretKey=…` and optionally `securityToken=…` (a ':' separator and
// surrounding spaces are accepted; '#' starts a comment line). Both keys are
// required.
func LoadCredentials(path string) (*Credentials, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cr := &Credentials{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			k, v, ok = strings.Cut(line, ":")
		}
		if !ok {
			return nil, fmt.Errorf("%s:%d: want key=value", path, i+1)
		}
		v = strings.Trim(strings.TrimSpace(v), `"'`)
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "accesskey":
			cr.AccessKey = v
		case "secretkey":
			cr.SecretKey = v
		case "securitytoken":
			cr.SecurityToken = v
		default:
			return nil, fmt.Errorf("%s:%d: unknown key %q (want accessKey, secretKey, securityToken)", path, i+1, k)
		}
	}
	if cr.AccessKey == "" || cr.SecretKey == "" {
		return nil, fmt.Errorf("%s: accessKey and secretKey are both required", path)
	}
	return cr, nil
}
