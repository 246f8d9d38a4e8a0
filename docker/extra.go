package docker

import (
	"fmt"
	"math"
	"net"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/go-units"
)

// Extra args are a closed set on purpose: each maps onto one Engine API
// field that cannot widen the container's privileges (no binds, no
// capabilities, no devices, no host namespaces). Keys and their values:
//
//	read_only_rootfs  bool             keep "/" read-only (default true)
//	tmpfs_size        size             size of the /tmp tmpfs (default 64m)
//	tmpfs             {path: options}  more tmpfs mounts, e.g. {"/home/node": "size=128m"};
//	                                   options from rw, ro, noexec, exec, nosuid, nodev, size=, mode=
//	pids_limit        integer ≥ 1      overrides Spec.PidsLimit
//	shm_size          size             size of /dev/shm
//	add_hosts         [“host:ip”]      extra /etc/hosts lines
//	dns               [ip]             DNS servers (only useful with a network)
//	hostname          string           container hostname
//	nofile            integer ≥ 1      RLIMIT_NOFILE (soft and hard)
//	cpuset_cpus       string           CPUs the container may use, e.g. "0-1"
//	init              bool             run tini as PID 1 (default true)
//	stop_grace        duration         Stop's wait between stdin EOF and kill, e.g. "5s"
//
// A size is a number of bytes or a string such as "64m"; JSON numbers arrive
// as float64 and must be whole.
var extraKeys = []string{
	"add_hosts", "cpuset_cpus", "dns", "hostname", "init", "nofile", "pids_limit",
	"read_only_rootfs", "shm_size", "stop_grace", "tmpfs", "tmpfs_size",
}

// ExtraArgKeys returns the accepted extra-arg keys, sorted.
func ExtraArgKeys() []string { return append([]string(nil), extraKeys...) }

// extraArgs is the parsed form of Spec.ExtraArgs; pointers mean "not set".
type extraArgs struct {
	readOnlyRootfs *bool
	tmpfsSize      int64
	tmpfs          map[string]string
	pidsLimit      int64
	shmSize        int64
	addHosts       []string
	dns            []string
	hostname       string
	nofile         int64
	cpusetCPUs     string
	init           *bool
	stopGrace      string
}

// ValidateExtraArgs checks a server's extra args against the closed set
// documented above. The error names the offending key and wraps
// ErrInvalidSpec, so the REST layer can refuse the configuration with 400.
func ValidateExtraArgs(m map[string]any) error {
	_, err := parseExtraArgs(m)
	return err
}

var (
	hostnameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
	hostRE     = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$`)
	cpusetRE   = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)
)

func parseExtraArgs(m map[string]any) (extraArgs, error) {
	var x extraArgs
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the same key first every time
	for _, k := range keys {
		if err := x.set(k, m[k]); err != nil {
			return extraArgs{}, fmt.Errorf("%w: extra arg %q: %v", ErrInvalidSpec, k, err)
		}
	}
	return x, nil
}

func (x *extraArgs) set(k string, v any) error {
	var err error
	switch k {
	case "read_only_rootfs":
		var b bool
		b, err = asBool(v)
		x.readOnlyRootfs = &b
	case "init":
		var b bool
		b, err = asBool(v)
		x.init = &b
	case "tmpfs_size":
		x.tmpfsSize, err = asSize(v)
	case "shm_size":
		x.shmSize, err = asSize(v)
	case "pids_limit":
		x.pidsLimit, err = asPositive(v)
	case "nofile":
		x.nofile, err = asPositive(v)
	case "tmpfs":
		x.tmpfs, err = asTmpfs(v)
	case "add_hosts":
		x.addHosts, err = asStrings(v)
		for _, h := range x.addHosts {
			name, ip, ok := strings.Cut(h, ":")
			if !ok || !hostRE.MatchString(name) || net.ParseIP(ip) == nil {
				return fmt.Errorf("%q is not host:ip", h)
			}
		}
	case "dns":
		x.dns, err = asStrings(v)
		for _, ip := range x.dns {
			if net.ParseIP(ip) == nil {
				return fmt.Errorf("%q is not an IP address", ip)
			}
		}
	case "hostname":
		s, ok := v.(string)
		if !ok || !hostnameRE.MatchString(s) {
			return fmt.Errorf("want a hostname label, got %v", v)
		}
		x.hostname = s
	case "cpuset_cpus":
		s, ok := v.(string)
		if !ok || !cpusetRE.MatchString(s) {
			return fmt.Errorf(`want a CPU list such as "0-1,3", got %v`, v)
		}
		x.cpusetCPUs = s
	case "stop_grace":
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf(`want a duration such as "5s", got %v`, v)
		}
		if _, err := parseGrace(s); err != nil {
			return err
		}
		x.stopGrace = s
	default:
		return fmt.Errorf("unknown key; accepted keys: %s", strings.Join(extraKeys, ", "))
	}
	return err
}

func asBool(v any) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("want true or false, got %v", v)
	}
	return b, nil
}

func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		if n != math.Trunc(n) || math.Abs(n) > 1<<53 {
			return 0, false
		}
		return int64(n), true
	case interface{ Int64() (int64, error) }: // json.Number
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}

func asPositive(v any) (int64, error) {
	n, ok := asInt(v)
	if !ok || n < 1 {
		return 0, fmt.Errorf("want a whole number ≥ 1, got %v", v)
	}
	return n, nil
}

func asSize(v any) (int64, error) {
	if s, ok := v.(string); ok {
		n, err := units.RAMInBytes(s)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("want a size such as \"64m\", got %q", s)
		}
		return n, nil
	}
	n, ok := asInt(v)
	if !ok || n < 1 {
		return 0, fmt.Errorf("want a size in bytes or such as \"64m\", got %v", v)
	}
	return n, nil
}

func asStrings(v any) ([]string, error) {
	switch l := v.(type) {
	case []string:
		return append([]string(nil), l...), nil
	case []any:
		out := make([]string, 0, len(l))
		for _, e := range l {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("want a list of strings, got element %v", e)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("want a list of strings, got %v", v)
}

var tmpfsFlags = map[string]bool{"rw": true, "ro": true, "noexec": true, "exec": true, "nosuid": true, "nodev": true}

func asTmpfs(v any) (map[string]string, error) {
	raw := map[string]any{}
	switch m := v.(type) {
	case map[string]any:
		raw = m
	case map[string]string:
		for k, s := range m {
			raw[k] = s
		}
	default:
		return nil, fmt.Errorf("want an object of path: options, got %v", v)
	}
	out := make(map[string]string, len(raw))
	for p, o := range raw {
		opts, ok := o.(string)
		if !ok {
			return nil, fmt.Errorf("options of %q: want a string", p)
		}
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return nil, fmt.Errorf("%q: want a clean absolute path other than /", p)
		}
		for _, opt := range strings.Split(opts, ",") {
			if opt == "" {
				continue
			}
			name, val, hasVal := strings.Cut(opt, "=")
			switch {
			case !hasVal && tmpfsFlags[name]:
			case hasVal && name == "size":
				if _, err := units.RAMInBytes(val); err != nil {
					return nil, fmt.Errorf("%q: bad size %q", p, val)
				}
			case hasVal && name == "mode":
				if _, err := strconv.ParseUint(val, 8, 32); err != nil {
					return nil, fmt.Errorf("%q: bad mode %q", p, val)
				}
			default:
				return nil, fmt.Errorf("%q: option %q not allowed", p, opt)
			}
		}
		out[p] = opts
	}
	return out, nil
}

// apply writes the extra args onto the container's configs.
func (x extraArgs) apply(cfg *container.Config, hc *container.HostConfig) {
	if x.hostname != "" {
		cfg.Hostname = x.hostname
	}
	if x.readOnlyRootfs != nil {
		hc.ReadonlyRootfs = *x.readOnlyRootfs
	}
	if x.init != nil {
		hc.Init = x.init
	}
	if x.tmpfsSize > 0 {
		hc.Tmpfs["/tmp"] = tmpOptions(x.tmpfsSize)
	}
	for p, o := range x.tmpfs {
		hc.Tmpfs[p] = o
	}
	if x.pidsLimit > 0 {
		n := x.pidsLimit
		hc.PidsLimit = &n
	}
	if x.shmSize > 0 {
		hc.ShmSize = x.shmSize
	}
	hc.ExtraHosts = append(hc.ExtraHosts, x.addHosts...)
	hc.DNS = append(hc.DNS, x.dns...)
	if x.nofile > 0 {
		hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: "nofile", Soft: x.nofile, Hard: x.nofile})
	}
	if x.cpusetCPUs != "" {
		hc.CpusetCpus = x.cpusetCPUs
	}
}

func tmpOptions(size int64) string {
	return "rw,noexec,nosuid,nodev,size=" + strconv.FormatInt(size, 10)
}
