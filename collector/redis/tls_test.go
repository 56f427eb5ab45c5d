package redis

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stall-exporter/stall_exporter/collector/redis/replies"
	"github.com/stall-exporter/stall_exporter/internal/collectortest"
)

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all signed by the CA, into dir.
func testPKI(t *testing.T, dir string) (ca, srvCert, srvKey, cliCert, cliKey string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stall test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caParsed, _ := x509.ParseCertificate(caDER)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage, ips []net.IP) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caParsed, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(key)
		c := writeFile(t, dir, name+".crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
		k := writeFile(t, dir, name+".key", string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})))
		return c, k
	}
	ca = writeFile(t, dir, "ca.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})))
	srvCert, srvKey = issue("server", 2, x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	cliCert, cliKey = issue("client", 3, x509.ExtKeyUsageClientAuth, nil)
	return
}

// TestTLS: a rediss:// target verified with --redis.tls.ca-file and
// presenting --redis.tls.cert-file to a server that requires client
// certificates; without the CA the target is down.
func TestTLS(t *testing.T) {
	redisServerPath(t)
	dir := t.TempDir()
	ca, sc, sk, cc, ck := testPKI(t, dir)
	port := freePort(t)
	r := &testRedis{t: t, port: port, dir: dir, tls: true, args: []string{
		"--port", "0", "--tls-port", strconv.Itoa(port), "--tls-cert-file", sc, "--tls-key-file", sk,
		"--tls-ca-cert-file", ca, "--tls-auth-clients", "yes"}}
	r.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	r.start("127.0.0.1")
	t.Cleanup(r.stop)

	s := testSettings()
	load := func(ts tlsSettings) tlsSettings {
		t.Helper()
		loaded, err := ts.load()
		if err != nil {
			t.Fatal(err)
		}
		return loaded
	}
	s.conn.tls = load(tlsSettings{caFile: ca, certFile: cc, keyFile: ck})
	c := newTestScraper(t, s, collectortest.Config("redis", nil), "rediss://"+r.addr)
	res := collectortest.Scrape(t, c, 3*time.Second)
	if v := res.Must(t, "stall_redis_up", "addr", "rediss://"+r.addr); v != 1 {
		t.Fatalf("TLS target down: %v", res.Err)
	}
	// Without the client certificate the server refuses the handshake;
	// without the CA the exporter refuses the server.
	for name, tls := range map[string]tlsSettings{
		"no client cert": {caFile: ca},
		"unknown CA":     {certFile: cc, keyFile: ck},
	} {
		s.conn.tls = load(tls)
		c := newTestScraper(t, s, collectortest.Config("redis", nil), "rediss://"+r.addr)
		if v := collectortest.Scrape(t, c, 3*time.Second).Must(t, "stall_redis_up"); v != 0 {
			t.Errorf("%s: up = %v", name, v)
		}
	}
	if _, err := (tlsSettings{caFile: filepath.Join(dir, "missing.pem")}).load(); err == nil {
		t.Error("a missing CA file should be a flag error")
	}
}

// TestUnixSocket: a unix:// target, and Unix-socket clients with a
// backlog grouped under the socket path (--redis.client-group-by=host).
func TestUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	r := startRedis(t, "--unixsocket", sock, "--unixsocketperm", "700")
	admin := r.client()
	if err := admin.Set(t.Context(), "big", strings.Repeat("x", bigValueSize), 0).Err(); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET big\r\nGET big\r\nGET big\r\n")); err != nil {
		t.Fatal(err)
	}
	collectortest.WaitFor(t, 10*time.Second, "the unix client's backlog", func() error {
		list, _ := admin.ClientList(t.Context()).Result()
		if n := clientListStats(list, replies.GroupByHost).MaxOutputBufferBytes; n < 5<<20 {
			return fmt.Errorf("largest omem %d", n)
		}
		return nil
	})
	s := testSettings()
	s.clMode = "always"
	c := newTestScraper(t, s, collectortest.Config("redis", nil), "unix://"+sock)
	res := collectortest.Scrape(t, c, 3*time.Second)
	l := "unix://" + sock
	if v := res.Must(t, "stall_redis_up", "addr", l); v != 1 {
		t.Fatalf("unix target down: %v", res.Err)
	}
	if v := res.Must(t, "stall_redis_client_group_output_buffer_bytes", "addr", l, "group", sock); v < 5<<20 {
		t.Errorf("socket-path group holds %v bytes, want ≥ 5 MiB", v)
	}
}
