package server

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/mcpgate/mcpgate/store"
)

type serverCreate struct {
	Name        string            `json:"name"`
	Protocol    string            `json:"protocol"`
	Command     string            `json:"command"`
	Args        []string          `json:"args"`
	Env         map[string]string `json:"env"`
	URL         string            `json:"url"`
	Headers     map[string]string `json:"headers"`
	WorkingDir  string            `json:"working_dir"`
	Enabled     *bool             `json:"enabled"`
	Quarantined *bool             `json:"quarantined"`
	Shared      *bool             `json:"shared"`
	Isolation   *isolationPatch   `json:"isolation"`
	OAuth       *oauthInput       `json:"oauth"`
}

// decodeServerCreate parses a POST body into a new server (not yet owned).
func decodeServerCreate(body []byte, admin bool) (store.Server, *oauthInput, error) {
	var in serverCreate
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return store.Server{}, nil, badRequest("body must be a JSON object")
	}
	if err := exactKeys(top, serverCreate{}, ""); err != nil {
		return store.Server{}, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return store.Server{}, nil, badRequest("invalid body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if in.Isolation != nil && in.Isolation.Enabled.IsSpecified() {
		return store.Server{}, nil, readOnly("isolation.enabled")
	}
	if !admin && in.Shared != nil && *in.Shared {
		return store.Server{}, nil, badRequest("%s; members add personal servers", describeChange("shared"))
	}
	if !admin && in.Quarantined != nil {
		return store.Server{}, nil, badRequest("%s; new servers start quarantined until approved", describeChange("quarantined"))
	}
	srv := store.Server{
		Name: in.Name, Protocol: in.Protocol, Command: in.Command, Args: in.Args, Env: in.Env, URL: in.URL,
		Headers: in.Headers, WorkingDir: in.WorkingDir, Enabled: true, Quarantined: true,
	}
	if srv.Env == nil {
		srv.Env = map[string]string{}
	}
	if srv.Headers == nil {
		srv.Headers = map[string]string{}
	}
	if in.Enabled != nil {
		srv.Enabled = *in.Enabled
	}
	if in.Quarantined != nil {
		srv.Quarantined = *in.Quarantined
	}
	if in.Shared != nil {
		srv.Shared = *in.Shared
	}
	if in.Isolation != nil {
		srv = applyServerPatch(srv, serverPatch{Isolation: nullableOf(*in.Isolation)})
	}
	return srv, in.OAuth, nil
}
