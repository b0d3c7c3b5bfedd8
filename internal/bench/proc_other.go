//go:build !linux

package bench

import (
	"os"
	"syscall"
)

// procAttr returns nil: only Linux can tie a child's life to the harness.
func procAttr() *syscall.SysProcAttr { return nil }

// peakRSS is unknown outside Linux (ru_maxrss units differ).
func peakRSS(*os.ProcessState) int64 { return 0 }

// procPeakRSS is unavailable without /proc.
func procPeakRSS(int) (int64, bool) { return 0, false }

// procCPU is unavailable without /proc.
func procCPU(int) (float64, bool) { return 0, false }

// hostCPU is unavailable without /proc.
func hostCPU() (busy, total uint64, ok bool) { return 0, 0, false }
