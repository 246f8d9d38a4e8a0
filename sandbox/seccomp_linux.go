package sandbox

import (
	"fmt"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

const ipprotoMPTCP = 262

// denyEPERM and denyENOSYS are seccomp actions carrying their errno; a bare
// ActionErrno would return 0, that is, success.
const (
	denyEPERM  = seccomp.ActionErrno | seccomp.Action(unix.EPERM)
	denyENOSYS = seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)
)

// networkFilter is the seccomp policy for NetworkNone: Landlock (below ABI
// 10) only governs classic TCP, so everything else that reaches the network
// is refused at socket(2). Comparisons are written so that garbage in the
// upper half of an int argument (which the kernel ignores) can only make a
// call more likely to be refused: exact values are allowed, never matched
// for a denial.
func networkFilter() seccomp.Policy {
	var rules []seccomp.NameWithConditions
	// Families other than unix, netlink and IP: packet, vsock, bluetooth…
	rules = append(rules, seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{
		{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX},
		{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_NETLINK},
		{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET},
		{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET6},
	}})
	for _, family := range []uint64{unix.AF_INET, unix.AF_INET6} {
		rules = append(rules,
			// Any type but SOCK_STREAM: UDP, raw, SCTP's seqpacket…
			seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.Equal, Value: family},
				{Argument: 1, Operation: seccomp.BitsSet, Value: 0xe},
			}},
			// A stream protocol other than TCP: MPTCP, SCTP.
			seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.Equal, Value: family},
				{Argument: 2, Operation: seccomp.NotEqual, Value: 0},
				{Argument: 2, Operation: seccomp.NotEqual, Value: unix.IPPROTO_TCP},
			}},
		)
	}
	// MPTCP whatever the family, as the design promises it outright.
	rules = append(rules, seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{
		{Argument: 2, Operation: seccomp.Equal, Value: ipprotoMPTCP},
	}})
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: denyEPERM, NamesWithCondtions: rules},
			// io_uring can create sockets without socket(2). ENOSYS makes
			// runtimes (libuv) fall back to plain syscalls.
			{Action: denyENOSYS, Names: []string{"io_uring_setup"}},
		},
	}
}

// loadNetworkFilter installs networkFilter on every thread of the process.
// go-seccomp-bpf lets calls of a foreign architecture (i386 via int 0x80 on
// x86-64, where socketcall would bypass the rules) through to the default
// action, so the filter is prefixed with a check that refuses them.
func loadNetworkFilter() error {
	native, err := arch.GetInfo("")
	if err != nil {
		return fmt.Errorf("detecting architecture: %w", err)
	}
	policy := networkFilter()
	body, err := policy.Assemble()
	if err != nil {
		return fmt.Errorf("assembling seccomp filter: %w", err)
	}
	prog := append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(denyEPERM)},
	}, body...)
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return fmt.Errorf("assembling seccomp filter: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	// TSYNC puts the filter on every thread (the exec may happen on any of
	// them as far as the kernel knows); a positive return names a thread
	// that could not be synchronised.
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("loading seccomp filter: %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("loading seccomp filter: thread %d could not be synchronised", r)
	}
	return nil
}
