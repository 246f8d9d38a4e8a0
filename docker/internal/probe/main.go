// Command probe reports, from inside a container, what the docker package's
// hardening left it able to do, and plays misbehaving children for the
// lifecycle tests. It is static so it runs in a FROM scratch image.
//
//	probe facts [-read PATH]... [-write PATH]... [-tcp ADDR] [-udp ADDR]   (then waits for stdin EOF)
//	probe flood STDERR_BYTES STDOUT_LINES
//	probe exit CODE
//	probe alloc       (touches memory until the kernel kills it)
//	probe hang        (ignores stdin EOF and signals it can ignore)
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Facts is what "probe facts" prints as one JSON line.
type Facts struct {
	UID        int               `json:"uid"`
	GID        int               `json:"gid"`
	Status     map[string]string `json:"status"` // CapEff, CapBnd, NoNewPrivs, Seccomp from /proc/self/status
	Interfaces []string          `json:"interfaces"`
	RootWrite  string            `json:"root_write"` // error text, "" on success
	TmpWrite   string            `json:"tmp_write"`
	Reads      map[string]string `json:"reads"`
	Writes     map[string]string `json:"writes"`
	TCP        string            `json:"tcp,omitempty"`
	UDP        string            `json:"udp,omitempty"`
	Env        []string          `json:"env"`
	Cwd        string            `json:"cwd"`
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe facts|flood|exit|hang")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "facts":
		facts(os.Args[2:])
	case "flood":
		flood(os.Args[2:])
	case "exit":
		code, _ := strconv.Atoi(os.Args[2])
		os.Exit(code)
	case "alloc":
		alloc()
	case "hang":
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
		fmt.Println("hanging")
		// Wait for a signal that never comes: a bare select{} would be a
		// deadlock the runtime kills with status 2, while a pending
		// signal.Notify keeps the process legitimately blocked.
		never := make(chan os.Signal, 1)
		signal.Notify(never, syscall.SIGUSR2)
		<-never
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func facts(args []string) {
	fs := flag.NewFlagSet("facts", flag.ExitOnError)
	var reads, writes list
	fs.Var(&reads, "read", "path to try reading")
	fs.Var(&writes, "write", "path to try creating a file in")
	tcp := fs.String("tcp", "", "address to try a TCP connect to")
	udp := fs.String("udp", "", "address to try a UDP send to")
	_ = fs.Parse(args)

	f := Facts{UID: os.Getuid(), GID: os.Getgid(), Status: map[string]string{},
		Reads: map[string]string{}, Writes: map[string]string{}, Env: os.Environ()}
	f.Cwd, _ = os.Getwd()
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok {
				f.Status[k] = strings.TrimSpace(v)
			}
		}
	}
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			f.Interfaces = append(f.Interfaces, i.Name)
		}
	}
	f.RootWrite = errText(os.WriteFile("/probe-write", []byte("x"), 0o600))
	f.TmpWrite = errText(os.WriteFile("/tmp/probe-write", []byte("x"), 0o600))
	for _, p := range reads {
		_, err := os.ReadFile(p)
		if err != nil && strings.Contains(err.Error(), "is a directory") {
			_, err = os.ReadDir(p)
		}
		f.Reads[p] = errText(err)
	}
	for _, p := range writes {
		f.Writes[p] = errText(os.WriteFile(p+"/probe-write", []byte("x"), 0o600))
	}
	if *tcp != "" {
		c, err := net.DialTimeout("tcp", *tcp, 2*time.Second)
		if err == nil {
			c.Close()
		}
		f.TCP = errText(err)
	}
	if *udp != "" {
		c, err := net.Dial("udp", *udp)
		if err == nil {
			_, err = c.Write([]byte("probe"))
			c.Close()
		}
		f.UDP = errText(err)
	}
	_ = json.NewEncoder(os.Stdout).Encode(f)
	// Stay up until stdin ends, so the test can inspect the container.
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// flood writes n bytes to stderr while it writes lines to stdout, so a
// reader that lets stderr back up stalls stdout too.
func flood(args []string) {
	n, _ := strconv.Atoi(args[0])
	lines, _ := strconv.Atoi(args[1])
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		chunk := []byte(strings.Repeat("e", 32<<10-1) + "\n")
		for n > 0 {
			w := min(n, len(chunk))
			if _, err := os.Stderr.Write(chunk[:w]); err != nil {
				os.Exit(3)
			}
			n -= w
		}
	}()
	out := bufio.NewWriter(os.Stdout)
	for i := range lines {
		fmt.Fprintf(out, "line %d\n", i)
		if i%100 == 0 {
			out.Flush()
		}
	}
	out.Flush()
	wg.Wait()
}

var sink [][]byte

func alloc() {
	for i := 0; ; i++ {
		b := make([]byte, 4<<20)
		for j := range b {
			b[j] = byte(i)
		}
		sink = append(sink, b)
		if i%4 == 0 {
			fmt.Printf("allocated %d MiB\n", (i+1)*4)
		}
	}
}
