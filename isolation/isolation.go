// Package isolation decides how a server's child is confined: the resolution
// of DESIGN.md §4 from the server's raw overrides, the global mode and what
// the host offers. It is pure: the host's facts come in as a value.
package isolation

import "path/filepath"

// Modes.
const (
	Docker  = "docker"
	Sandbox = "sandbox"
	None    = "none"
)

// Sources say which rule decided; clients treat an unknown one as Global.
const (
	SourceGlobal             = "global"
	SourceServerMode         = "server-mode"
	SourceServerOptOut       = "server-opt-out"
	SourceServerOptInIgnored = "server-opt-in-ignored"
	SourceNotStdio           = "not-stdio"
	SourceAlreadyDocker      = "already-docker"
	SourceSandboxUnavailable = "sandbox-unavailable"
	SourceDockerUnavailable  = "docker-unavailable"
	SourceUnsupportedMode    = "unsupported-mode"
)

// MinABI is the Landlock ABI below which the sandbox is not trusted:
// ABI 6 adds signal and abstract-socket scoping.
const MinABI = 6

// Host is what this machine offers, probed at start.
type Host struct {
	LandlockABI     int  // 0: no Landlock
	DockerAvailable bool // the engine answered within 2 s
}

// SandboxAvailable reports whether the sandbox can confine a child here.
func (h Host) SandboxAvailable() bool { return h.LandlockABI >= MinABI }

// Server is the part of a server definition resolution reads.
type Server struct {
	Protocol        string
	Command         string
	EnabledOverride *bool
	ModeOverride    *string
}

// Effective is the resolved isolation of one server.
type Effective struct {
	Mode       string `json:"mode"`
	Isolated   bool   `json:"isolated"`
	GlobalMode string `json:"global_mode"`
	Inherited  bool   `json:"inherited"`
	Source     string `json:"source"`
}

// Resolve applies the rules in order, first match wins, then the host gate:
// a mode the host cannot deliver is reported as not isolated, never claimed.
func Resolve(s Server, global string, host Host) Effective {
	e := Effective{GlobalMode: global}
	switch {
	case s.Protocol != "stdio":
		e.Mode, e.Source = None, SourceNotStdio
		return e
	case filepath.Base(s.Command) == "docker":
		e.Mode, e.Source = None, SourceAlreadyDocker
		return e
	case s.ModeOverride != nil:
		e.Mode, e.Source = *s.ModeOverride, SourceServerMode
	case s.EnabledOverride != nil && !*s.EnabledOverride:
		e.Mode, e.Source = None, SourceServerOptOut
	case s.EnabledOverride != nil && *s.EnabledOverride:
		if global == None {
			e.Mode, e.Source = None, SourceServerOptInIgnored
		} else {
			e.Mode, e.Source = global, SourceGlobal
		}
	default:
		e.Mode, e.Source, e.Inherited = global, SourceGlobal, true
	}
	switch e.Mode {
	case None:
	case Sandbox:
		if host.SandboxAvailable() {
			e.Isolated = true
		} else {
			e.Source = SourceSandboxUnavailable
		}
	case Docker:
		if host.DockerAvailable {
			e.Isolated = true
		} else {
			e.Source = SourceDockerUnavailable
		}
	default:
		e.Source = SourceUnsupportedMode
	}
	return e
}

// DefaultGlobal is the global mode chosen on first start: the strongest the
// host offers.
func DefaultGlobal(host Host) string {
	switch {
	case host.DockerAvailable:
		return Docker
	case host.SandboxAvailable():
		return Sandbox
	default:
		return None
	}
}
