package isolation

import "testing"

func ptr[T any](v T) *T { return &v }

func TestResolve(t *testing.T) {
	full := Host{LandlockABI: 7, DockerAvailable: true}
	bare := Host{}
	tests := []struct {
		name   string
		s      Server
		global string
		host   Host
		want   Effective
	}{
		{"http is never isolated", Server{Protocol: "streamable-http", ModeOverride: ptr(Docker)}, Docker, full,
			Effective{None, false, Docker, false, SourceNotStdio}},
		{"docker command", Server{Protocol: "stdio", Command: "/usr/bin/docker"}, Sandbox, full,
			Effective{None, false, Sandbox, false, SourceAlreadyDocker}},
		{"mode override wins over opt-out", Server{Protocol: "stdio", Command: "npx", ModeOverride: ptr(Sandbox), EnabledOverride: ptr(false)}, Docker, full,
			Effective{Sandbox, true, Docker, false, SourceServerMode}},
		{"opt-out", Server{Protocol: "stdio", Command: "npx", EnabledOverride: ptr(false)}, Docker, full,
			Effective{None, false, Docker, false, SourceServerOptOut}},
		{"opt-in takes the global mode", Server{Protocol: "stdio", Command: "npx", EnabledOverride: ptr(true)}, Sandbox, full,
			Effective{Sandbox, true, Sandbox, false, SourceGlobal}},
		{"opt-in under none is ignored", Server{Protocol: "stdio", Command: "npx", EnabledOverride: ptr(true)}, None, full,
			Effective{None, false, None, false, SourceServerOptInIgnored}},
		{"inherit", Server{Protocol: "stdio", Command: "npx"}, Docker, full,
			Effective{Docker, true, Docker, true, SourceGlobal}},
		{"inherit none", Server{Protocol: "stdio", Command: "npx"}, None, full,
			Effective{None, false, None, true, SourceGlobal}},
		{"sandbox without landlock", Server{Protocol: "stdio", Command: "npx"}, Sandbox, bare,
			Effective{Sandbox, false, Sandbox, true, SourceSandboxUnavailable}},
		{"sandbox below the ABI floor", Server{Protocol: "stdio", Command: "npx"}, Sandbox, Host{LandlockABI: 5},
			Effective{Sandbox, false, Sandbox, true, SourceSandboxUnavailable}},
		{"docker without engine", Server{Protocol: "stdio", Command: "npx", ModeOverride: ptr(Docker)}, None, bare,
			Effective{Docker, false, None, false, SourceDockerUnavailable}},
		{"unknown stored mode", Server{Protocol: "stdio", Command: "npx", ModeOverride: ptr("vm")}, None, full,
			Effective{"vm", false, None, false, SourceUnsupportedMode}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Resolve(tt.s, tt.global, tt.host); got != tt.want {
				t.Errorf("Resolve = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDefaultGlobal(t *testing.T) {
	for _, tt := range []struct {
		h    Host
		want string
	}{
		{Host{LandlockABI: 7, DockerAvailable: true}, Docker},
		{Host{LandlockABI: 7}, Sandbox},
		{Host{LandlockABI: 3}, None},
		{Host{}, None},
	} {
		if got := DefaultGlobal(tt.h); got != tt.want {
			t.Errorf("DefaultGlobal(%+v) = %s, want %s", tt.h, got, tt.want)
		}
	}
}
