package main

import (
	"errors"
	"runtime/debug"
	"syscall"
)

// int80 makes a system call through the i386 compatibility entry point,
// which seccomp filters see with another architecture.
func int80(trap, a1, a2, a3 uintptr) uintptr

// sys386Socket is socket(2) in the i386 syscall table.
const sys386Socket = 359

// errNoCompat is returned where the kernel has no i386 emulation: int 0x80
// then faults.
var errNoCompat = errors.New("no i386 system call entry on this kernel")

// compatUDP opens a UDP socket through the i386 entry point: a filter that
// only knows x86-64 system call numbers would let it through.
func compatUDP() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			err = errNoCompat
		}
	}()
	r := int64(int32(int80(sys386Socket, syscall.AF_INET, syscall.SOCK_DGRAM, 0)))
	if r < 0 {
		return syscall.Errno(-r)
	}
	syscall.Close(int(r))
	return nil
}
