// Command testsummary turns `go test -json` into what `make test` shows:
//
//	go test -json ./... 2>&1 | testsummary stream RAW   # go test's usual text; RAW keeps the events
//	testsummary report RAW...                           # skipped, not run, failed; N passed, N failed, N skipped
//
// report exits 1 when a test or a package failed. The Makefile runs both
// modules' tests side by side, each through its own stream, and one report
// over both.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	switch {
	case len(args) == 2 && args[0] == "stream":
		f, err := os.Create(args[1])
		if err != nil {
			return err
		}
		if err := Stream(os.Stdin, f, os.Stdout); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	case len(args) >= 2 && args[0] == "report":
		var s Summary
		for _, name := range args[1:] {
			f, err := os.Open(name)
			if err != nil {
				return err
			}
			err = s.Read(f)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		s.Write(os.Stdout)
		if len(s.Failed) > 0 {
			os.Exit(1)
		}
		return nil
	}
	return errors.New("usage: testsummary stream RAW < events | testsummary report RAW")
}
