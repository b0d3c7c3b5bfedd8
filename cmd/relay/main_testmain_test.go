package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain removes the binary that buildBinary built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}
