// Command escapeprobe tries, from inside whatever confinement runs it, the
// escapes that mcpgate's isolation must stop, and prints one JSON object
// mapping each probe to "allowed" or "denied: <ERRNO>" (or, for the
// informational probes, what it saw).
//
// It uses the standard library only and is built with CGO_ENABLED=0, so the
// same binary runs under the native sandbox and inside a FROM scratch image.
//
// Each argument is KEY=PARAM or KEY, where KEY is KIND or KIND.LABEL (the
// label only keeps keys unique). Kinds:
//
//	read=PATH      open PATH read-only and read a byte
//	write=PATH     create or truncate PATH and write a byte
//	list=DIR       list DIR
//	exec=PATH      start PATH (no arguments) and wait for it
//	environ=PID    read /proc/PID/environ
//	signal=PID     kill(PID, 0)
//	chmod=PATH     chmod PATH to the mode it already has
//	unix=PATH      connect to a pathname unix stream socket
//	tcp=IP:PORT    plain TCP connect
//	tcpbind=IP:PORT plain TCP bind
//	mptcp=IP:PORT  Multipath TCP socket and connect
//	udp=IP:PORT    UDP socket and sendto (IPv4 or IPv6 by the address)
//	socket=F/T/P   socket(F, T, P), numbers: 40/1/0 is vsock, 2/1/132 SCTP
//	compatudp      a UDP socket through the i386 system call entry (amd64)
//	nofile=N       open N more files; "denied: EMFILE" when the limit stops it
//	mmap=MIB       map MIB MiB of private writable memory (counts against
//	               RLIMIT_DATA) without touching it
//	fds            the open descriptors, e.g. "0,1,2"
//	caps           CapEff and CapBnd from /proc/self/status
//	nnp            the NoNewPrivs flag
//	pdeathsig      the parent-death signal number
//	uid            real and effective uid
//	pgid           "pid=P pgid=G"
//	env            the names in the environment, sorted, comma-separated
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

const ipprotoMPTCP = 262

func init() {
	// The parent-death signal (and capabilities) are per thread; keep main
	// on the main thread, the one that carries what the exec passed on.
	runtime.LockOSThread()
}

func main() {
	results := make(map[string]string, len(os.Args))
	for _, arg := range os.Args[1:] {
		key, param, _ := strings.Cut(arg, "=")
		kind, _, _ := strings.Cut(key, ".")
		results[key] = run(kind, param)
	}
	b, err := json.Marshal(results)
	if err != nil {
		fmt.Fprintln(os.Stderr, "escapeprobe:", err)
		os.Exit(2)
	}
	os.Stdout.Write(append(b, '\n'))
}

func run(kind, param string) string {
	switch kind {
	case "read":
		return verdict(readOne(param))
	case "write":
		return verdict(writeOne(param))
	case "list":
		f, err := os.Open(param)
		if err == nil {
			_, err = f.Readdirnames(-1)
			f.Close()
		}
		return verdict(err)
	case "exec":
		cmd := exec.Command(param)
		err := cmd.Start()
		if err == nil {
			cmd.Wait() // the exit status is the target's business
		}
		return verdict(err)
	case "environ":
		return verdict(readOne("/proc/" + param + "/environ"))
	case "signal":
		pid, err := strconv.Atoi(param)
		if err != nil {
			return "error: " + err.Error()
		}
		return verdict(syscall.Kill(pid, 0))
	case "chmod":
		var st syscall.Stat_t
		if err := syscall.Stat(param, &st); err != nil {
			return verdict(err)
		}
		return verdict(syscall.Chmod(param, st.Mode&0o7777))
	case "unix":
		return verdict(connectUnix(param))
	case "tcp":
		return verdict(inet(param, syscall.SOCK_STREAM, 0, false))
	case "tcpbind":
		return verdict(inet(param, syscall.SOCK_STREAM, 0, true))
	case "mptcp":
		return verdict(inet(param, syscall.SOCK_STREAM, ipprotoMPTCP, false))
	case "udp":
		return verdict(inet(param, syscall.SOCK_DGRAM, 0, false))
	case "socket":
		var f, typ, proto int
		if _, err := fmt.Sscanf(param, "%d/%d/%d", &f, &typ, &proto); err != nil {
			return "error: " + err.Error()
		}
		fd, err := syscall.Socket(f, typ|syscall.SOCK_CLOEXEC, proto)
		if err == nil {
			syscall.Close(fd)
		}
		return verdict(err)
	case "compatudp":
		return verdict(compatUDP())
	case "nofile":
		n, err := strconv.Atoi(param)
		if err != nil {
			return "error: " + err.Error()
		}
		return verdict(openMany(n))
	case "mmap":
		mib, err := strconv.Atoi(param)
		if err != nil {
			return "error: " + err.Error()
		}
		b, err := syscall.Mmap(-1, 0, mib<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err == nil {
			syscall.Munmap(b)
		}
		return verdict(err)
	case "fds":
		return fds()
	case "caps":
		return status("CapEff", "CapBnd")
	case "nnp":
		return status("NoNewPrivs")
	case "pdeathsig":
		var sig int32
		if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0); e != 0 {
			return verdict(e)
		}
		return strconv.Itoa(int(sig))
	case "uid":
		return fmt.Sprintf("uid=%d euid=%d", os.Getuid(), os.Geteuid())
	case "env":
		var names []string
		for _, kv := range os.Environ() {
			k, _, _ := strings.Cut(kv, "=")
			names = append(names, k)
		}
		sort.Strings(names)
		return strings.Join(names, ",")
	case "pgid":
		return fmt.Sprintf("pid=%d pgid=%d", os.Getpid(), syscall.Getpgrp())
	}
	return "error: unknown probe " + kind
}

// verdict maps an error to the wire form: an errno is a denial, anything
// else is an error the caller must not read as either outcome.
func verdict(err error) string {
	if err == nil {
		return "allowed"
	}
	var errno syscall.Errno
	if asErrno(err, &errno) {
		return "denied: " + errnoName(errno)
	}
	return "error: " + err.Error()
}

func asErrno(err error, out *syscall.Errno) bool {
	for err != nil {
		if e, ok := err.(syscall.Errno); ok {
			*out = e
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

var errnoNames = map[syscall.Errno]string{
	syscall.EACCES: "EACCES", syscall.EPERM: "EPERM", syscall.ENOENT: "ENOENT",
	syscall.EMFILE: "EMFILE", syscall.ENFILE: "ENFILE", syscall.ECONNREFUSED: "ECONNREFUSED",
	syscall.EAFNOSUPPORT: "EAFNOSUPPORT", syscall.EPROTONOSUPPORT: "EPROTONOSUPPORT",
	syscall.EXDEV: "EXDEV", syscall.EROFS: "EROFS", syscall.ENETUNREACH: "ENETUNREACH",
	syscall.ENOSYS: "ENOSYS", syscall.EINVAL: "EINVAL", syscall.ESRCH: "ESRCH",
	syscall.EADDRINUSE: "EADDRINUSE", syscall.EADDRNOTAVAIL: "EADDRNOTAVAIL",
	syscall.ENOTDIR: "ENOTDIR", syscall.EISDIR: "EISDIR", syscall.ETIMEDOUT: "ETIMEDOUT",
	syscall.EAGAIN: "EAGAIN", syscall.ENOMEM: "ENOMEM", syscall.EFBIG: "EFBIG",
}

func errnoName(e syscall.Errno) string {
	if n, ok := errnoNames[e]; ok {
		return n
	}
	return "errno " + strconv.Itoa(int(e))
}

func readOne(path string) error {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var b [1]byte
	_, err = syscall.Read(fd, b[:])
	return err
}

func writeOne(path string) error {
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	_, err = syscall.Write(fd, []byte("x"))
	return err
}

func connectUnix(path string) error {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	return syscall.Connect(fd, &syscall.SockaddrUnix{Name: path})
}

// inet uses raw syscalls rather than package net so that nothing (such as
// net's MPTCP default for listeners) changes the socket that is tried.
func inet(addr string, typ, proto int, bind bool) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("parsing %q: %v", addr, err)
	}
	family := syscall.AF_INET
	var sa syscall.Sockaddr
	if ap.Addr().Is4() {
		sa = &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	} else {
		family = syscall.AF_INET6
		sa = &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	fd, err := syscall.Socket(family, typ|syscall.SOCK_CLOEXEC, proto)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	switch {
	case bind:
		return syscall.Bind(fd, sa)
	case typ == syscall.SOCK_DGRAM:
		return syscall.Sendto(fd, []byte("probe"), 0, sa)
	}
	return syscall.Connect(fd, sa)
}

func openMany(n int) error {
	var opened []int
	defer func() {
		for _, fd := range opened {
			syscall.Close(fd)
		}
	}()
	for range n {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		opened = append(opened, fd)
	}
	return nil
}

// fds lists /proc/self/fd without the descriptor used to list it and
// without the Go runtime's own: epoll, its eventfd, and the cgroup CPU
// files it keeps open to follow the CPU quota.
func fds() string {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return verdict(err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return verdict(err)
	}
	var out []string
	for _, n := range names {
		fd, _ := strconv.Atoi(n)
		if uintptr(fd) == d.Fd() {
			continue
		}
		target, _ := os.Readlink("/proc/self/fd/" + n)
		if target == "anon_inode:[eventpoll]" || target == "anon_inode:[eventfd]" ||
			strings.HasPrefix(target, "/sys/fs/cgroup/") {
			continue
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := strconv.Atoi(out[i])
		b, _ := strconv.Atoi(out[j])
		return a < b
	})
	return strings.Join(out, ",")
}

func status(fields ...string) string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return verdict(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		for _, want := range fields {
			if k == want {
				out = append(out, k+"="+strings.TrimSpace(v))
			}
		}
	}
	return strings.Join(out, " ")
}
