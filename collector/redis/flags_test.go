package redis

import (
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"

	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// parseFlags parses a command line with the redis collector's flags and
// validates it, as the start of the exporter does.
func parseFlags(args ...string) (settings, error) {
	app := kingpin.New("test", "")
	f := registerFlags(app)
	if _, err := app.Parse(args); err != nil {
		return settings{}, err
	}
	return f.validate()
}

// TestFlagValidation: a negative, zero or non-numeric value of any redis
// flag refuses the start with an error naming the flag, and so does
// --redis.password-env naming a variable that is not set (it used to mean
// "no password") and a --redis.password-file that cannot be opened (it was
// reported at the first scrape, as a Redis that is down).
func TestFlagValidation(t *testing.T) {
	t.Setenv("STALL_TEST_PW_SET", "pw")
	t.Setenv("STALL_TEST_PW_EMPTY", "")
	if _, err := parseFlags(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	for _, arg := range []string{
		"--redis.client-list.output-buffer-threshold=-1MiB",
		"--redis.client-list.clients-memory-threshold=-5",
		"--redis.client-list.output-buffer-threshold=lots",
		"--redis.max-reply-bytes=-64MiB",
		"--redis.max-reply-bytes=1KiB",
		"--redis.bigkeys.min-bytes=-64KiB",
		"--redis.timeout=-1s",
		"--redis.timeout=0s",
		"--redis.dial-timeout=-2s",
		"--redis.config-refresh-interval=-5m",
		"--redis.client-list.every=-1",
		"--redis.client-list.top-k=0",
		"--redis.bigkeys.keys-per-second=NaN",
		"--redis.bigkeys.keys-per-second=+Inf",
		"--redis.bigkeys.keys-per-second=-3",
		"--redis.bigkeys.top=0",
		"--redis.bigkeys.samples=-1",
		"--redis.bigkeys.interval=-1h",
		"--redis.client-group-by=pods",
		"--redis.password-env=STALL_TEST_PW_UNSET",
		"--redis.password-file=/nonexistent/stall-test/redis-pw",
	} {
		_, err := parseFlags(arg)
		flag, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if err == nil {
			t.Errorf("%s accepted", arg)
		} else if !strings.Contains(err.Error(), flag) && !strings.Contains(arg, "client-group-by") {
			t.Errorf("%s: the error does not name the flag: %v", arg, err)
		}
	}
	s, err := parseFlags("--redis.password-env=STALL_TEST_PW_SET", "--redis.client-list.output-buffer-threshold=2MiB",
		"--redis.max-reply-bytes=16MiB", "--redis.bigkeys.min-bytes=1MB")
	if err != nil {
		t.Fatal(err)
	}
	if s.clOutThreshold != 2<<20 || s.conn.clientListLimit != 16<<20 || s.bigkeys.minBytes != 1<<20 {
		t.Errorf("parsed %d %d %d", s.clOutThreshold, s.conn.clientListLimit, s.bigkeys.minBytes)
	}
	if _, err := parseFlags("--redis.password-file=" + writeFile(t, t.TempDir(), "pw", "pw\n")); err != nil {
		t.Errorf("a password file that exists: %v", err)
	}
	// A variable that is set but empty is a choice (no password), not a typo.
	if _, err := parseFlags("--redis.password-env=STALL_TEST_PW_EMPTY"); err != nil {
		t.Errorf("an empty but set variable: %v", err)
	}
	// The same for a target's own ?password_env=.
	_, err = newScraper(collectortest.Config("redis", nil), testSettings(), []string{"redis://127.0.0.1:1?password_env=STALL_TEST_PW_UNSET"})
	if err == nil || !strings.Contains(err.Error(), "STALL_TEST_PW_UNSET") {
		t.Errorf("?password_env= naming an unset variable: %v", err)
	}
}

// TestStartupErrorsNameTheFlag: an error at start names the flag to fix
// (before, a missing --redis.tls.ca-file was reported as
// "--redis.probe.allowed-targets: --redis.tls.ca-file: open …", and so were
// a bad certificate or key and an address configured twice).
func TestStartupErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	notPEM := writeFile(t, dir, "not.pem", "not a certificate\n")
	for _, c := range []struct {
		args      []string
		want      []string // in the error
		wantNot   []string // not in the error
		wantStart string   // the error's first words
	}{
		{[]string{"--redis.addr=rediss://127.0.0.1:1", "--redis.tls.ca-file=/nonexistent/ca.pem"},
			[]string{"/nonexistent/ca.pem"}, []string{"allowed-targets", "--redis.addr"}, "--redis.tls.ca-file"},
		{[]string{"--redis.addr=rediss://127.0.0.1:1", "--redis.tls.ca-file=" + notPEM},
			[]string{"no PEM certificates"}, []string{"allowed-targets", "--redis.addr"}, "--redis.tls.ca-file"},
		{[]string{"--redis.addr=rediss://127.0.0.1:1", "--redis.tls.cert-file=/nonexistent/c.pem", "--redis.tls.key-file=/nonexistent/k.pem"},
			[]string{"/nonexistent/c.pem"}, []string{"allowed-targets", "--redis.addr"}, "--redis.tls.cert-file"},
		{[]string{"--redis.addr=rediss://127.0.0.1:1", "--redis.tls.cert-file=" + notPEM},
			nil, []string{"allowed-targets", "--redis.addr"}, "--redis.tls.key-file"},
		{[]string{"--redis.probe.allowed-targets=rediss://127.0.0.1:1", "--redis.tls.ca-file=/nonexistent/ca.pem"},
			nil, []string{"allowed-targets"}, "--redis.tls.ca-file"},
		{[]string{"--redis.addr=redis://h:1", "--redis.probe.allowed-targets=rediss://h:1"},
			[]string{"--redis.addr redis://h:1", "--redis.probe.allowed-targets rediss://h:1"}, nil, ""},
		{[]string{"--redis.addr=redis://monitor@h:1", "--redis.addr=redis://h:2", "--redis.probe.allowed-targets=redis://admin@h:1"},
			[]string{"--redis.addr redis://monitor@h:1", "--redis.probe.allowed-targets redis://admin@h:1"}, nil, ""},
		{[]string{"--redis.addr=redis://h:1", "--redis.addr=rediss://h:1"},
			[]string{"--redis.addr redis://h:1", "--redis.addr rediss://h:1"}, []string{"allowed-targets"}, ""},
		{[]string{"--redis.addr=redis://[::1"}, nil, []string{"allowed-targets"}, "--redis.addr"},
		// A port outside 1–65535 stops the start, not every scrape.
		{[]string{"--redis.addr=127.0.0.1:99999"}, []string{"127.0.0.1:99999", "1-65535"}, []string{"allowed-targets"}, "--redis.addr"},
		{[]string{"--redis.addr=redis://h:0"}, []string{"1-65535"}, nil, "--redis.addr"},
		{[]string{"--redis.addr=h:6379x"}, nil, nil, "--redis.addr"},
		{[]string{"--redis.probe.allowed-targets=h:70000"}, []string{"1-65535"}, nil, "--redis.probe.allowed-targets"},
		{[]string{"--redis.probe.allowed-targets=redis://[::1"}, nil, nil, "--redis.probe.allowed-targets"},
		{[]string{"--redis.probe.allowed-targets-regexp=("}, nil, nil, "--redis.probe.allowed-targets-regexp"},
	} {
		app := kingpin.New("test", "")
		f := registerFlags(app)
		if _, err := app.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		// The /metrics collector and the /probe module, both built at start.
		_, err := f.collector(collectortest.Config("redis", nil))
		if err == nil {
			_, err = f.probe()
		}
		if err == nil {
			t.Errorf("%q: accepted", c.args)
			continue
		}
		msg := err.Error()
		bad := !strings.HasPrefix(msg, c.wantStart)
		for _, w := range c.want {
			bad = bad || !strings.Contains(msg, w)
		}
		for _, w := range c.wantNot {
			bad = bad || strings.Contains(msg, w)
		}
		if bad {
			t.Errorf("%q: %q; want it to start with %q, name %q and not %q", c.args, msg, c.wantStart, c.want, c.wantNot)
		}
	}
}

// TestMalformedScheme: a target whose scheme lacks its colon or a slash
// (redis//host:port, redis:/host:port) is called a malformed URL, not read
// as host "redis" with an invalid database number, and the message does
// not quote it (it may hold a password); redis:6379 is a host named redis.
func TestMalformedScheme(t *testing.T) {
	for _, raw := range []string{"redis//cache-1:6379", "rediss//u:pw@cache-1:6380", "redis:/cache-1:6379", "UNIX:/run/redis.sock", "cache-1:6379//0"} {
		_, err := parseTarget(raw, testSettings().conn)
		if err == nil || !strings.Contains(err.Error(), "malformed URL") || strings.Contains(err.Error(), "cache-1") || strings.Contains(err.Error(), "database") {
			t.Errorf("%s: %v, want the malformed-URL error", raw, err)
		}
	}
	for _, raw := range []string{"redis:6379", "cache-1:6379/0", "redis://cache-1:6379"} {
		if _, err := parseTarget(raw, testSettings().conn); err != nil {
			t.Errorf("%s: %v", raw, err)
		}
	}
}
