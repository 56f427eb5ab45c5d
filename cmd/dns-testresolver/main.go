// Command dns-testresolver serves fixed DNS answers (package
// collector/dns/dnstest) on UDP and TCP, to try the dns collector by hand:
// PTR of 192.0.2.N answers, of 203.0.113.N is NXDOMAIN, of 198.51.100.N
// never answers. See docs/dns.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/stall-exporter/stall_exporter/collector/dns/dnstest"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:53", "address to serve DNS on, UDP and TCP")
	flag.Parse()
	s, err := dnstest.Listen(*listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dns-testresolver:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "dns-testresolver: serving on", *listen)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	s.Close()
}
