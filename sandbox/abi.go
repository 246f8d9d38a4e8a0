package sandbox

import (
	"fmt"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// ABI reports the kernel's usable Landlock ABI version. Like go-landlock
// itself, it counts ABI 6 and later as 5 when the kernel lacks the fix for
// signal scoping (erratum 2), so a floor of 6 is never met by a kernel
// whose scopes go-landlock would skip. An error means no Landlock at all
// (ENOSYS: not built in; EOPNOTSUPP: disabled at boot).
func ABI() (int, error) {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0, fmt.Errorf("querying landlock ABI: %w", err)
	}
	if v >= 6 {
		errata, err := llsys.LandlockGetErrata()
		if err != nil || errata&0x2 == 0 {
			v = 5
		}
	}
	return v, nil
}

// Available reports the host's Landlock ABI and whether it meets minABI.
// When ok is false, a sandboxed server runs degraded (or not at all, when
// failing closed), and the core reports it as isolated: false with source
// sandbox-unavailable.
func Available(minABI int) (abi int, ok bool) {
	abi, err := ABI()
	if err != nil {
		return 0, false
	}
	return abi, abi >= minABI && abi > 0
}
