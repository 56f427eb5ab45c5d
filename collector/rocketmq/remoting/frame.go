// Package remoting is a small client for Apache RocketMQ's remoting protocol:
// the length-prefixed TCP frames that brokers and name servers speak, in both
// header serializations (JSON and the ROCKETMQ binary layout), plus the reply
// bodies stall_exporter reads (runtime info, broker config, cluster info).
//
// Frame layout (big-endian):
//
//	frameLen u32   bytes after this word: 4 + headerLen + bodyLen
//	typeLen  u32   top byte: serialization (0 JSON, 1 ROCKETMQ); low 24 bits: headerLen
//	header         headerLen bytes
//	body           the rest
//
// Requests are always sent with a JSON header; replies are decoded by the
// type byte of each frame, because a broker started with
// -Drocketmq.serialize.type=ROCKETMQ answers in binary whatever it was asked in.
package remoting

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
)

// Serialization is the header encoding named by a frame's type byte.
type Serialization byte

const (
	// JSON headers: {"code":…,"flag":…,"language":"GO","opaque":…,"version":…}.
	JSON Serialization = 0
	// Binary is RocketMQ's own header layout (serialize type "ROCKETMQ").
	Binary Serialization = 1
)

// DefaultMaxFrame is the largest frame (frameLen) accepted by default:
// 16 MiB, the broker's and name server's own default limit.
const DefaultMaxFrame = 16 << 20

// FlagResponse is bit 0 of a header's flag: the frame is a response (bit 1,
// a oneway request, is never sent).
const FlagResponse = 1

// Request codes used by stall_exporter.
const (
	GetBrokerConfig      = 26
	GetBrokerRuntimeInfo = 28
	GetBrokerClusterInfo = 106
)

// Response codes (header code of a response frame).
const (
	Success                 = 0
	SystemError             = 1
	SystemBusy              = 2
	RequestCodeNotSupported = 3
	NoPermission            = 16
)

// languages maps the binary language byte to the name JSON headers carry.
var languages = []string{"JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS"}

func languageName(b byte) string {
	if int(b) < len(languages) {
		return languages[b]
	}
	return "LANGUAGE_" + strconv.Itoa(int(b))
}

func languageCode(name string) byte {
	if i := slices.Index(languages, name); i >= 0 {
		return byte(i)
	}
	return 7 // OTHER
}

// Command is one decoded frame: header fields and body.
type Command struct {
	Code      int               // request code, or response code in a response
	Language  string            // sender's language name, e.g. "JAVA"
	Version   int               // sender's protocol version
	Opaque    int32             // request id, echoed by the response
	Flag      int32             // FlagResponse bit
	Remark    string            // error text of a failed response
	ExtFields map[string]string // custom header fields
	Body      []byte

	// Serialization is the header encoding the frame arrived in (set by
	// Decode) or is to be sent in (used by Encode).
	Serialization Serialization
}

// IsResponse reports whether the response bit of the flag is set.
func (c *Command) IsResponse() bool { return c.Flag&FlagResponse != 0 }

// Errors of the decoders. Every failure to decode a frame, its header or a
// reply body (ParseKVTable, ParseClusterInfo), and a frame cut short by the
// end of the stream, wraps ErrMalformed; a length word over the limit is
// ErrFrameTooLarge. IsBadReply tells both from transport errors and
// well-formed error replies.
var (
	ErrMalformed     = errors.New("malformed remoting frame")
	ErrFrameTooLarge = errors.New("remoting frame over the size limit")
)

// IsBadReply reports whether err means the peer sent bytes that are not a
// valid reply (ErrMalformed, including a frame cut short, or
// ErrFrameTooLarge): bad input to count, as opposed to a timeout, a refused
// or reset connection, a clean close, or a *ResponseError.
func IsBadReply(err error) bool {
	return errors.Is(err, ErrMalformed) || errors.Is(err, ErrFrameTooLarge)
}

// jsonHeader is the JSON header. Field order gives the same bytes as the
// Go and Java clients for a plain request; decoding ignores unknown fields
// and accepts any order.
type jsonHeader struct {
	Code      int               `json:"code"`
	ExtFields map[string]string `json:"extFields,omitempty"`
	Flag      int32             `json:"flag"`
	Language  string            `json:"language"`
	Opaque    int32             `json:"opaque"`
	Remark    string            `json:"remark,omitempty"`
	Version   int               `json:"version"`
}

// Encode returns the whole frame (with its length word) for c, with the
// header in c.Serialization.
func Encode(c *Command) ([]byte, error) {
	var header []byte
	switch c.Serialization {
	case JSON:
		var err error
		header, err = json.Marshal(jsonHeader{Code: c.Code, ExtFields: c.ExtFields, Flag: c.Flag,
			Language: c.Language, Opaque: c.Opaque, Remark: c.Remark, Version: c.Version})
		if err != nil {
			return nil, err
		}
	case Binary:
		header = encodeBinaryHeader(c)
	default:
		return nil, fmt.Errorf("cannot encode serialization %d", c.Serialization)
	}
	if len(header) > 0xFFFFFF {
		return nil, fmt.Errorf("header of %d bytes does not fit 24 bits", len(header))
	}
	n := 4 + len(header) + len(c.Body)
	if uint64(n) > 0xFFFFFFFF-4 {
		return nil, fmt.Errorf("frame of %d bytes does not fit 32 bits", n)
	}
	out := make([]byte, 8, 4+n)
	binary.BigEndian.PutUint32(out[0:], uint32(n))
	binary.BigEndian.PutUint32(out[4:], uint32(c.Serialization)<<24|uint32(len(header)))
	out = append(out, header...)
	return append(out, c.Body...), nil
}

func encodeBinaryHeader(c *Command) []byte {
	b := make([]byte, 0, 21+len(c.Remark)+16*len(c.ExtFields))
	b = binary.BigEndian.AppendUint16(b, uint16(int16(c.Code)))
	b = append(b, languageCode(c.Language))
	b = binary.BigEndian.AppendUint16(b, uint16(int16(c.Version)))
	b = binary.BigEndian.AppendUint32(b, uint32(c.Opaque))
	b = binary.BigEndian.AppendUint32(b, uint32(c.Flag))
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.Remark)))
	b = append(b, c.Remark...)
	var ext []byte
	for _, k := range slices.Sorted(maps.Keys(c.ExtFields)) {
		v := c.ExtFields[k]
		ext = binary.BigEndian.AppendUint16(ext, uint16(len(k)))
		ext = append(ext, k...)
		ext = binary.BigEndian.AppendUint32(ext, uint32(len(v)))
		ext = append(ext, v...)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(ext)))
	return append(b, ext...)
}

// ReadCommand reads one frame from r and decodes it. A frame whose length
// word exceeds maxFrame (DefaultMaxFrame when ≤ 0) is refused with
// ErrFrameTooLarge before anything is allocated; the stream is then out of
// step and the connection must be closed. Memory is allocated as the frame's
// bytes arrive, not as its length word promises (see readFrame). io.EOF is
// returned only when r ends cleanly before a frame starts; a stream that
// ends inside a frame (or its length word) is an error wrapping both
// ErrMalformed and io.ErrUnexpectedEOF.
func ReadCommand(r io.Reader, maxFrame int) (*Command, error) {
	return readCommand(r, maxFrame, nil)
}

// readCommand is ReadCommand with alloc (see readFrame).
func readCommand(r io.Reader, maxFrame int, alloc func(n, replaced int) error) (*Command, error) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	var lw [4]byte
	if k, err := io.ReadFull(r, lw[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("%w: connection closed after %d bytes of a length word: %w", ErrMalformed, k, err)
		}
		return nil, err
	}
	n := binary.BigEndian.Uint32(lw[:])
	if uint64(n) > uint64(maxFrame) {
		return nil, fmt.Errorf("%w: frame announces %d bytes, limit %d", ErrFrameTooLarge, n, maxFrame)
	}
	if n < 4 {
		return nil, fmt.Errorf("%w: frame length %d is shorter than its header-length word", ErrMalformed, n)
	}
	buf, err := readFrame(r, int(n), alloc)
	if err != nil {
		return nil, err
	}
	return Decode(buf)
}

// readChunk is the first allocation for a frame's bytes; most replies
// (runtime info is about 3 KB) fit in it.
const readChunk = 64 << 10

// readFrame reads the n bytes of a frame after its length word. The buffer
// starts at readChunk and doubles only when the bytes already read fill it,
// so a peer that announces a large frame and then stalls costs at most
// max(readChunk, twice what it sent) — never the n it promised. A complete
// frame of n bytes is allocated in steps that add up to less than 2n.
// alloc, when not nil, is told the size of each buffer before it is
// allocated and the size of the buffer it replaces (0 for the first), and
// may refuse it.
func readFrame(r io.Reader, n int, alloc func(n, replaced int) error) ([]byte, error) {
	if alloc == nil {
		alloc = func(int, int) error { return nil }
	}
	if err := alloc(min(n, readChunk), 0); err != nil {
		return nil, err
	}
	buf := make([]byte, min(n, readChunk))
	got := 0
	for {
		k, err := io.ReadFull(r, buf[got:])
		got += k
		if err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				// The peer closed inside a frame it had announced: it
				// answered, badly. Not a clean close before the frame.
				return nil, fmt.Errorf("%w: connection closed after %d of %d bytes: %w", ErrMalformed, got, n, io.ErrUnexpectedEOF)
			}
			return nil, err
		}
		if got == n {
			return buf, nil
		}
		next := min(n, 2*got)
		if err := alloc(next, got); err != nil {
			return nil, err
		}
		buf = slices.Grow(buf, next-got)[:next]
	}
}

// Decode decodes one frame without its leading length word: the
// header-length word, the header and the body. The body aliases frame.
func Decode(frame []byte) (*Command, error) {
	if len(frame) < 4 {
		return nil, fmt.Errorf("%w: %d bytes, need at least 4", ErrMalformed, len(frame))
	}
	w := binary.BigEndian.Uint32(frame)
	typ := Serialization(w >> 24)
	hl := int(w & 0xFFFFFF)
	if hl > len(frame)-4 {
		return nil, fmt.Errorf("%w: header length %d exceeds the %d bytes left", ErrMalformed, hl, len(frame)-4)
	}
	header, body := frame[4:4+hl], frame[4+hl:]
	var c *Command
	var err error
	switch typ {
	case JSON:
		c, err = decodeJSONHeader(header)
	case Binary:
		c, err = decodeBinaryHeader(header)
	default:
		return nil, fmt.Errorf("%w: unknown serialization type %d", ErrMalformed, byte(typ))
	}
	if err != nil {
		return nil, err
	}
	c.Serialization = typ
	if len(body) > 0 {
		c.Body = body
	}
	return c, nil
}

func decodeJSONHeader(h []byte) (*Command, error) {
	var jh jsonHeader
	if err := json.Unmarshal(h, &jh); err != nil {
		return nil, fmt.Errorf("%w: JSON header: %w", ErrMalformed, err)
	}
	return &Command{Code: jh.Code, Language: jh.Language, Version: jh.Version, Opaque: jh.Opaque,
		Flag: jh.Flag, Remark: jh.Remark, ExtFields: jh.ExtFields}, nil
}

func decodeBinaryHeader(h []byte) (*Command, error) {
	if len(h) < 21 {
		return nil, fmt.Errorf("%w: binary header: %d bytes, need at least 21", ErrMalformed, len(h))
	}
	c := &Command{
		Code:     int(int16(binary.BigEndian.Uint16(h[0:]))),
		Language: languageName(h[2]),
		Version:  int(int16(binary.BigEndian.Uint16(h[3:]))),
		Opaque:   int32(binary.BigEndian.Uint32(h[5:])),
		Flag:     int32(binary.BigEndian.Uint32(h[9:])),
	}
	rest := h[13:]
	// field takes the next field: a big-endian length of size bytes (2 or
	// 4), then that many bytes.
	field := func(size int, what string) ([]byte, error) {
		if len(rest) < size {
			return nil, fmt.Errorf("%w: binary header: truncated %s length", ErrMalformed, what)
		}
		var n uint64
		if size == 2 {
			n = uint64(binary.BigEndian.Uint16(rest))
		} else {
			n = uint64(binary.BigEndian.Uint32(rest))
		}
		if rest = rest[size:]; n > uint64(len(rest)) {
			return nil, fmt.Errorf("%w: binary header: %s beyond the header", ErrMalformed, what)
		}
		f := rest[:n]
		rest = rest[n:]
		return f, nil
	}
	remark, err := field(4, "remark")
	if err != nil {
		return nil, err
	}
	c.Remark = string(remark)
	ext, err := field(4, "extFields")
	if err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		return nil, fmt.Errorf("%w: binary header: %d bytes after extFields", ErrMalformed, len(rest))
	}
	for rest = ext; len(rest) > 0; {
		k, err := field(2, "extFields key")
		if err != nil {
			return nil, err
		}
		v, err := field(4, "extFields value")
		if err != nil {
			return nil, err
		}
		if c.ExtFields == nil {
			c.ExtFields = map[string]string{}
		}
		c.ExtFields[string(k)] = string(v)
	}
	return c, nil
}
