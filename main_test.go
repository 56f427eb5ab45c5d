package main

import (
	"os"
	"testing"

	"github.com/alecthomas/kingpin/v2"
)

// TestMain gives every kingpin flag its default, as the binary has after
// kingpin.Parse, so collectors built in tests and benchmarks behave as in
// production (kingpin leaves flag variables zero until Parse).
func TestMain(m *testing.M) {
	if _, err := kingpin.CommandLine.Parse(nil); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}
