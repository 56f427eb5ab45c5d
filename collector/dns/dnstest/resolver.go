// Package dnstest is a tiny DNS server with fixed answers, for the dns
// collector's tests and for trying the collector by hand
// (cmd/dns-testresolver). It answers by name:
//
//   - PTR of 192.0.2.N (N.2.0.192.in-addr.arpa.): NOERROR, host.test.
//   - PTR of 203.0.113.N: NXDOMAIN
//   - PTR of 198.51.100.N: never (the client times out)
//   - ok.test. A 192.0.2.1, AAAA 2001:db8::1; nx.test.: NXDOMAIN
//   - big.test. TXT: truncated (TC, no answer) over UDP, 500 bytes over TCP
//   - anything else: REFUSED
package dnstest

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Answer returns the response to query q, or nil for no response.
func Answer(q []byte, overTCP bool) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	question, err := p.Question()
	if err != nil {
		return nil
	}
	name := strings.ToLower(question.Name.String())
	m := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: h.ID, Response: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true},
		Questions: []dnsmessage.Question{question},
	}
	var answer dnsmessage.ResourceBody
	switch {
	case strings.HasSuffix(name, ".2.0.192.in-addr.arpa.") && question.Type == dnsmessage.TypePTR:
		answer = &dnsmessage.PTRResource{PTR: dnsmessage.MustNewName("host.test.")}
	case strings.HasSuffix(name, ".113.0.203.in-addr.arpa."), name == "nx.test.":
		m.RCode = dnsmessage.RCodeNameError
	case strings.HasSuffix(name, ".100.51.198.in-addr.arpa."):
		return nil
	case name == "ok.test." && question.Type == dnsmessage.TypeA:
		answer = &dnsmessage.AResource{A: [4]byte{192, 0, 2, 1}}
	case name == "ok.test." && question.Type == dnsmessage.TypeAAAA:
		answer = &dnsmessage.AAAAResource{AAAA: [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 1}}
	case name == "ok.test.":
	case name == "big.test." && !overTCP:
		m.Truncated = true
	case name == "big.test." && question.Type == dnsmessage.TypeTXT:
		answer = &dnsmessage.TXTResource{TXT: []string{strings.Repeat("x", 250), strings.Repeat("y", 250)}}
	default:
		m.RCode = dnsmessage.RCodeRefused
	}
	if answer != nil {
		m.Answers = []dnsmessage.Resource{{
			Header: dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 60},
			Body:   answer,
		}}
	}
	msg, err := m.Pack() // names compressed, as by a real server
	if err != nil {
		return nil
	}
	return msg
}

// Server serves Answer over UDP and TCP on one address.
type Server struct {
	udp net.PacketConn
	tcp net.Listener
	wg  sync.WaitGroup
}

// Listen starts a server on addr (host:port) for UDP and TCP.
func Listen(addr string) (*Server, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return nil, err
	}
	s := &Server{udp: pc, tcp: l}
	s.wg.Go(s.serveUDP)
	s.wg.Go(s.serveTCP)
	return s, nil
}

func (s *Server) serveUDP() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.udp.ReadFrom(buf)
		if err != nil {
			return
		}
		if msg := Answer(buf[:n], false); msg != nil {
			_, _ = s.udp.WriteTo(msg, from)
		}
	}
}

func (s *Server) serveTCP() {
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			return
		}
		go serveConn(c)
	}
}

func serveConn(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var lb [2]byte
	for {
		if _, err := io.ReadFull(c, lb[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(lb[:]))
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		if msg := Answer(q, true); msg != nil {
			_, _ = c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...))
		}
	}
}

// Close stops the server and waits for its loops.
func (s *Server) Close() {
	s.udp.Close()
	s.tcp.Close()
	s.wg.Wait()
}
