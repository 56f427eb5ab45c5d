package resplimit

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// Replies as Redis 2.4 … 8.x and RESP3 servers send them.
var validReplies = []string{
	"+OK\r\n",
	"-ERR unknown command 'HELLO'\r\n",
	"-ERR Syntax error, try CLIENT (LIST | KILL ip:port)\r\n",
	":1024\r\n",
	"$-1\r\n",
	"*-1\r\n",
	"$0\r\n\r\n",
	"$5\r\nhello\r\n",
	"*2\r\n$26\r\nclient-output-buffer-limit\r\n$4\r\nx y \r\n",
	"*3\r\n$4\r\npeak\r\n:123\r\n*2\r\n:1\r\n$-1\r\n", // nested, as MEMORY STATS
	"%2\r\n+a\r\n:1\r\n+b\r\n,3.14\r\n",               // RESP3 map and double
	"~1\r\n#t\r\n",                                    // set, boolean
	"_\r\n",                                           // null
	"(3492890328409238509324850943850943825024385\r\n",
	"=15\r\ntxt:Some string\r\n",                    // verbatim
	"!21\r\nSYNTAX invalid syntax\r\n",              // blob error
	">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n", // push
	"|1\r\n+key\r\n+val\r\n*0\r\n",                  // attribute then empty array
}

// feed lexes p whole.
func feed(l *Lexer, p []byte) error {
	for len(p) > 0 {
		n, err := l.Next(p)
		if err != nil {
			return err
		}
		p = p[n:]
	}
	return l.err
}

func TestLexerValid(t *testing.T) {
	all := strings.Join(validReplies, "")
	l := Lexer{Limit: 1 << 20}
	if err := feed(&l, []byte(all)); err != nil {
		t.Fatalf("valid stream refused: %v", err)
	}
	if l.st != stType {
		t.Errorf("stream ended mid-value (state %d)", l.st)
	}
	// Byte by byte: the same verdict and the same charge.
	b := Lexer{Limit: 1 << 20}
	for i := range len(all) {
		if err := feed(&b, []byte{all[i]}); err != nil {
			t.Fatalf("byte %d: %v", i, err)
		}
	}
	if b.charged != l.charged {
		t.Errorf("charged %d byte by byte, %d at once", b.charged, l.charged)
	}
}

func TestLexerLimits(t *testing.T) {
	cases := []struct {
		name  string
		limit int64
		in    string
		want  error
	}{
		{"800 MB bulk announced", 64 << 20, "$838860800\r\n", ErrTooLarge},
		{"bulk exactly at the limit", 14, "$8\r\n12345678\r\n", nil}, // 4 header bytes + 8 + CRLF
		{"bulk one byte over", 13, "$8\r\n12345678\r\n", ErrTooLarge},
		{"huge array", 64 << 20, "*100000000\r\n", ErrTooLarge},
		{"huge map counts pairs", 1000, "%20\r\n", ErrTooLarge},
		{"map within", 2000, "%20\r\n", nil},
		{"endless simple string", 1 << 30, "+" + strings.Repeat("a", MaxLine+1), ErrProtocol},
		{"bytes beyond the budget", 100, strings.Repeat(":1\r\n", 30), ErrTooLarge},
		{"unknown type", 100, "?x\r\n", ErrProtocol},
		{"streamed aggregate", 100, "*?\r\n", ErrProtocol},
		{"negative length", 100, "$-2\r\n", ErrProtocol},
		{"empty length", 100, "$\r\n", ErrProtocol},
		{"minus only", 100, "*-\r\n", ErrProtocol},
		{"no LF", 100, "$1\rx", ErrProtocol},
		{"long header", 1 << 40, "$0000000000000000000000001\r\n", ErrProtocol},
		{"length overflow", 1 << 62, "$9999999999999999999\r\n", ErrProtocol},
		{"HTTP answer", 1 << 20, "HTTP/1.1 400 Bad Request\r\n", ErrProtocol},
	}
	for _, c := range cases {
		l := Lexer{Limit: c.limit}
		err := feed(&l, []byte(c.in))
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if err != nil && !errors.Is(feed(&l, []byte("+OK\r\n")), c.want) {
			t.Errorf("%s: the error is not sticky", c.name)
		}
	}
}

// TestLexerReset: the budget is per command; a Write (Reset) between two
// replies gives each the whole budget, a pipeline shares it.
func TestLexerReset(t *testing.T) {
	reply := "$30\r\n" + strings.Repeat("x", 30) + "\r\n" // charged 5 + 32
	l := Lexer{Limit: 60}
	if err := feed(&l, []byte(reply)); err != nil {
		t.Fatal(err)
	}
	l.Reset()
	if err := feed(&l, []byte(reply)); err != nil {
		t.Fatalf("second command: %v", err)
	}
	if err := feed(&l, []byte(reply)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("two replies to one command within 60 bytes: %v", err)
	}
}

func FuzzLexer(f *testing.F) {
	f.Add([]byte(strings.Join(validReplies, "")), uint16(7), uint32(1<<20))
	f.Add([]byte("$838860800\r\n"), uint16(3), uint32(1<<26))
	f.Add([]byte("*3\r\n$1\r\na\r\n%1\r\n+k\r\n:1\r\n_\r\n"), uint16(1), uint32(200))
	f.Add([]byte("$-1\r\n*-1\r\n$-2\r\n"), uint16(2), uint32(100))
	f.Fuzz(func(t *testing.T, data []byte, split uint16, limit uint32) {
		if limit == 0 {
			limit = 1
		}
		whole := Lexer{Limit: int64(limit)}
		errWhole := feed(&whole, data)
		if errWhole == nil && whole.charged > whole.Limit {
			t.Fatalf("charged %d over the limit %d without an error", whole.charged, whole.Limit)
		}
		if errWhole != nil && !errors.Is(errWhole, ErrTooLarge) && !errors.Is(errWhole, ErrProtocol) {
			t.Fatalf("unexpected error kind %v", errWhole)
		}
		// The verdict must not depend on how the stream is cut.
		step := int(split%64) + 1
		parts := Lexer{Limit: int64(limit)}
		var errParts error
		for i := 0; i < len(data) && errParts == nil; i += step {
			errParts = feed(&parts, data[i:min(i+step, len(data))])
		}
		if (errWhole == nil) != (errParts == nil) || errWhole != nil && errWhole.Error() != errParts.Error() {
			t.Fatalf("at once: %v; in %d-byte pieces: %v", errWhole, step, errParts)
		}
		if errWhole == nil && (whole.charged != parts.charged || whole.st != parts.st) {
			t.Fatalf("charged %d/%d, state %d/%d", whole.charged, parts.charged, whole.st, parts.st)
		}
	})
}

// BenchmarkLexer: the check on a 2.9 MB CLIENT LIST reply (10,000
// clients) fed in go-redis' 32 KiB reads — the cost the limit adds to the
// largest reply a scrape reads.
func BenchmarkLexer(b *testing.B) {
	line := "id=3 addr=10.1.0.6:40001 laddr=10.1.0.1:6379 fd=6 name=catalog-reader-5f7b9c8d6d-bqdkr age=10 idle=3 flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=16384 rbp=16384 obl=0 oll=1 omem=5242880 tot-mem=5280000 events=rw cmd=get user=app redir=-1 resp=2\n"
	body := strings.Repeat(line, 10000)
	reply := []byte("$" + strconv.Itoa(len(body)) + "\r\n" + body + "\r\n")
	b.SetBytes(int64(len(reply)))
	b.ReportAllocs()
	for b.Loop() {
		l := Lexer{Limit: 64 << 20}
		for p := reply; len(p) > 0; {
			n := min(len(p), 32<<10)
			if err := feed(&l, p[:n]); err != nil {
				b.Fatal(err)
			}
			p = p[n:]
		}
	}
}
