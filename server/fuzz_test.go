package server

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/mcpgate/mcpgate/store"
)

func fuzzBase() store.Server {
	return store.Server{
		ID: 1, Name: "base", Protocol: "stdio", Command: "npx", Args: []string{"-y", "pkg"},
		Env: map[string]string{"API_KEY": "secret-value-123", "MODE": "fast"}, Headers: map[string]string{},
		WorkingDir: "/srv", Enabled: true, Quarantined: true, OwnerID: 7,
		Isolation: store.Isolation{EnabledOverride: ptr(true), Image: ptr("img:1"), CPULimit: ptr(1.0)},
	}
}

// FuzzServerPatch (J1): the decoder never panics, every refusal is a 4xx
// problem, and a patch never changes a field it does not name.
func FuzzServerPatch(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"enabled":false}`, `{"env":{"API_KEY":null,"NEW":"v"}}`, `{"env":null}`, `{"isolation":null}`,
		`{"isolation":{"enabled_override":null,"mode_override":"docker"}}`, `{"isolation":{"enabled":true}}`,
		`{"args":null}`, `{"url":"https://x"}`, `{"name":"x"}`, `{"headers":{"A":"b"}}`, `[]`, `null`, `"x"`,
		`{"isolation":{"extra_args":{"a":1}}}`, `{"command":"uvx","protocol":"stdio"}`, `{"working_dir":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		base := fuzzBase()
		p, err := decodeServerPatch(body)
		if err != nil {
			var prob *Problem
			if !errors.As(err, &prob) || prob.Status < 400 || prob.Status >= 500 {
				t.Fatalf("refusal %v is not a 4xx problem", err)
			}
			return
		}
		next := applyServerPatch(base, p)
		if err := checkServer(&next, nil); err != nil {
			if toProblem(err).Status >= 500 {
				t.Fatalf("check gave %v", err)
			}
		}
		var named map[string]json.RawMessage
		if json.Unmarshal(body, &named) != nil {
			t.Fatalf("accepted a body that is not an object: %q", body)
		}
		base = fuzzBase()
		next = applyServerPatch(base, p)
		fields := map[string]func(store.Server) any{
			"protocol": func(s store.Server) any { return s.Protocol }, "command": func(s store.Server) any { return s.Command },
			"args": func(s store.Server) any { return s.Args }, "env": func(s store.Server) any { return s.Env },
			"url": func(s store.Server) any { return s.URL }, "headers": func(s store.Server) any { return s.Headers },
			"working_dir": func(s store.Server) any { return s.WorkingDir }, "enabled": func(s store.Server) any { return s.Enabled },
			"shared": func(s store.Server) any { return s.Shared }, "isolation": func(s store.Server) any { return s.Isolation },
		}
		for k, get := range fields {
			if _, ok := named[k]; ok {
				continue
			}
			if !reflect.DeepEqual(get(base), get(next)) {
				t.Fatalf("body %q changed %s, which it does not name", body, k)
			}
		}
		for _, fixed := range []func(store.Server) any{
			func(s store.Server) any { return s.Name }, func(s store.Server) any { return s.OwnerID },
			func(s store.Server) any { return s.Quarantined }, func(s store.Server) any { return s.ID },
		} {
			if !reflect.DeepEqual(fixed(base), fixed(next)) {
				t.Fatalf("body %q changed a read-only field", body)
			}
		}
	})
}
