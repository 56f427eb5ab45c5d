package main

import (
	"os"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"
)

// TestReadmeDocumentsEveryFlag fails when a command-line flag is not
// mentioned in README.md (regenerate its flag reference with `make readme-flags`).
func TestReadmeDocumentsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	model := kingpin.CommandLine.Model()
	if len(model.Flags) < 10 {
		t.Fatalf("only %d flags registered", len(model.Flags))
	}
	for _, f := range model.Flags {
		if f.Hidden || f.Name == "help" || f.Name == "version" || strings.HasPrefix(f.Name, "help-") {
			continue
		}
		if !strings.Contains(text, "--"+f.Name) && !strings.Contains(text, "--[no-]"+f.Name) {
			t.Errorf("flag --%s is not documented in README.md", f.Name)
		}
	}
}
