package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"

	"github.com/oapi-codegen/nullable"

	"github.com/mcpgate/mcpgate/isolation"
	"github.com/mcpgate/mcpgate/store"
)

// serverReadOnly are the fields of a server object that no request may
// set; a client that echoes a GET back learns to drop them.
var serverReadOnly = []string{"name", "owner", "quarantined", "isolation_effective", "status", "oauth", "created_at", "updated_at"}

type isolationPatch struct {
	Enabled         nullable.Nullable[bool]           `json:"enabled"`
	EnabledOverride nullable.Nullable[bool]           `json:"enabled_override"`
	ModeOverride    nullable.Nullable[string]         `json:"mode_override"`
	Image           nullable.Nullable[string]         `json:"image"`
	NetworkMode     nullable.Nullable[string]         `json:"network_mode"`
	MemoryLimit     nullable.Nullable[string]         `json:"memory_limit"`
	CPULimit        nullable.Nullable[float64]        `json:"cpu_limit"`
	ExtraArgs       nullable.Nullable[map[string]any] `json:"extra_args"`
}

// serverPatch is a merge patch: each field is absent, null or a value.
type serverPatch struct {
	Protocol   nullable.Nullable[string]             `json:"protocol"`
	Command    nullable.Nullable[string]             `json:"command"`
	Args       nullable.Nullable[[]string]           `json:"args"`
	Env        nullable.Nullable[map[string]*string] `json:"env"`
	URL        nullable.Nullable[string]             `json:"url"`
	Headers    nullable.Nullable[map[string]*string] `json:"headers"`
	WorkingDir nullable.Nullable[string]             `json:"working_dir"`
	Enabled    nullable.Nullable[bool]               `json:"enabled"`
	Shared     nullable.Nullable[bool]               `json:"shared"`
	Isolation  nullable.Nullable[isolationPatch]     `json:"isolation"`
}

// decodeServerPatch parses a PATCH body. Read-only fields are refused by
// name, null or not, so nothing is silently ignored.
func decodeServerPatch(body []byte) (serverPatch, error) {
	var p serverPatch
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return p, badRequest("body must be a JSON object")
	}
	for _, f := range serverReadOnly {
		if _, ok := top[f]; ok {
			return p, readOnly(f)
		}
	}
	// encoding/json matches keys case-insensitively; the contract does not.
	if err := exactKeys(top, serverPatch{}, ""); err != nil {
		return p, err
	}
	if raw, ok := top["isolation"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		var iso map[string]json.RawMessage
		if err := json.Unmarshal(raw, &iso); err != nil {
			return p, badRequest("isolation must be an object or null")
		}
		if _, ok := iso["enabled"]; ok {
			return p, readOnly("isolation.enabled")
		}
		if err := exactKeys(iso, isolationPatch{}, "isolation."); err != nil {
			return p, err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, badRequest("invalid body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return p, nil
}

// exactKeys refuses any key that is not exactly a json tag of v's type.
func exactKeys(m map[string]json.RawMessage, v any, prefix string) error {
	t := reflect.TypeOf(v)
	known := make(map[string]bool, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		known[name] = true
	}
	for k := range m {
		if !known[k] {
			return badRequest("unknown field %s%s", prefix, k)
		}
	}
	return nil
}

// mergeSecrets applies a key-by-key patch to a secret map. A value equal to
// the stored value's mask is an echo of a GET and keeps the stored value.
func mergeSecrets(cur map[string]string, patch nullable.Nullable[map[string]*string]) map[string]string {
	if !patch.IsSpecified() {
		return cur
	}
	if patch.IsNull() {
		return map[string]string{}
	}
	out := make(map[string]string, len(cur))
	for k, v := range cur {
		out[k] = v
	}
	m, _ := patch.Get()
	for k, v := range m {
		switch {
		case v == nil:
			delete(out, k)
		case strings.HasPrefix(*v, maskPrefix) && cur[k] != "" && *v == mask(cur[k]):
			// echoed mask: keep
		default:
			out[k] = *v
		}
	}
	return out
}

func setPtr[T any](dst **T, n nullable.Nullable[T]) {
	if !n.IsSpecified() {
		return
	}
	if n.IsNull() {
		*dst = nil
		return
	}
	v, _ := n.Get()
	*dst = &v
}

// applyServerPatch returns cur with the patch applied. It touches no field
// the patch does not name.
func applyServerPatch(cur store.Server, p serverPatch) store.Server {
	next := cur
	if v, err := p.Protocol.Get(); err == nil {
		next.Protocol = v
	}
	if v, err := p.Command.Get(); err == nil {
		next.Command = v
	} else if p.Command.IsNull() {
		next.Command = ""
	}
	if p.Args.IsSpecified() {
		next.Args = []string{}
		if v, err := p.Args.Get(); err == nil && v != nil {
			next.Args = v
		}
	}
	next.Env = mergeSecrets(cur.Env, p.Env)
	next.Headers = mergeSecrets(cur.Headers, p.Headers)
	if p.URL.IsSpecified() {
		next.URL = ""
		if v, err := p.URL.Get(); err == nil {
			if !(cur.URL != "" && v == maskURL(cur.URL) && v != cur.URL) {
				next.URL = v
			} else {
				next.URL = cur.URL
			}
		}
	}
	if p.WorkingDir.IsSpecified() {
		next.WorkingDir, _ = p.WorkingDir.Get()
	}
	if v, err := p.Enabled.Get(); err == nil {
		next.Enabled = v
	} else if p.Enabled.IsNull() {
		next.Enabled = true
	}
	if v, err := p.Shared.Get(); err == nil {
		next.Shared = v
	}
	if p.Isolation.IsSpecified() {
		if p.Isolation.IsNull() {
			next.Isolation = store.Isolation{}
		} else {
			ip, _ := p.Isolation.Get()
			iso := cur.Isolation
			setPtr(&iso.EnabledOverride, ip.EnabledOverride)
			setPtr(&iso.ModeOverride, ip.ModeOverride)
			setPtr(&iso.Image, ip.Image)
			setPtr(&iso.NetworkMode, ip.NetworkMode)
			setPtr(&iso.MemoryLimit, ip.MemoryLimit)
			setPtr(&iso.CPULimit, ip.CPULimit)
			if ip.ExtraArgs.IsSpecified() {
				iso.ExtraArgs, _ = ip.ExtraArgs.Get()
			}
			next.Isolation = iso
		}
	}
	return next
}

var (
	nameRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)
	memoryRe = regexp.MustCompile(`^[1-9][0-9]*[kKmMgG]?$`)
	envKeyRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	headerRe = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// ExtraArgsFunc validates isolation.extra_args; the Docker runner supplies
// the documented set.
type ExtraArgsFunc func(map[string]any) error

// checkServer validates a whole server definition after a create or a
// patch, so a sequence of patches cannot reach a state a create refuses.
func checkServer(srv *store.Server, extra ExtraArgsFunc) error {
	if !nameRe.MatchString(srv.Name) || len(srv.Name) > 64 {
		return badRequest("name must match [a-z0-9][a-z0-9_-]* and be at most 64 characters (no ':')")
	}
	if srv.Protocol == "" {
		switch {
		case srv.Command != "":
			srv.Protocol = "stdio"
		case srv.URL != "":
			srv.Protocol = "streamable-http"
		}
	}
	switch srv.Protocol {
	case "stdio":
		if srv.Command == "" {
			return badRequest("a stdio server needs a command")
		}
		if srv.URL != "" {
			return badRequest("a stdio server has a command, not a url")
		}
		if len(srv.Headers) > 0 {
			return badRequest("headers apply to HTTP servers only")
		}
	case "streamable-http", "sse":
		if srv.URL == "" {
			return badRequest("a %s server needs a url", srv.Protocol)
		}
		if srv.Command != "" || len(srv.Args) > 0 {
			return badRequest("an HTTP server has a url, not a command")
		}
		u, err := url.Parse(srv.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return badRequest("url must be an absolute http or https URL")
		}
	case "":
		return badRequest("a server needs a command (stdio) or a url (streamable-http, sse)")
	default:
		return badRequest("protocol must be one of stdio, streamable-http, sse")
	}
	if srv.WorkingDir != "" && !filepath.IsAbs(srv.WorkingDir) {
		return badRequest("working_dir must be an absolute path")
	}
	for k := range srv.Env {
		if !envKeyRe.MatchString(k) {
			return badRequest("env: %q is not a valid variable name", k)
		}
	}
	for k := range srv.Headers {
		if !headerRe.MatchString(k) {
			return badRequest("headers: %q is not a valid header name", k)
		}
		if strings.EqualFold(k, "Host") || strings.EqualFold(k, "Content-Length") {
			return badRequest("headers: %s cannot be set", k)
		}
	}
	iso := srv.Isolation
	if iso.ModeOverride != nil {
		switch *iso.ModeOverride {
		case isolation.Docker, isolation.Sandbox, isolation.None:
		default:
			return badRequest("isolation.mode_override must be one of docker, sandbox, none (or null to inherit)")
		}
	}
	if iso.MemoryLimit != nil && !memoryRe.MatchString(*iso.MemoryLimit) {
		return badRequest("isolation.memory_limit must be bytes or a number with k, m or g, such as 512m")
	}
	if iso.CPULimit != nil && (*iso.CPULimit <= 0 || *iso.CPULimit > 256) {
		return badRequest("isolation.cpu_limit must be more than 0 and at most 256")
	}
	if iso.NetworkMode != nil && *iso.NetworkMode != "none" && *iso.NetworkMode != "bridge" {
		return badRequest("isolation.network_mode must be none or bridge (or null to inherit)")
	}
	if len(iso.ExtraArgs) > 0 && extra != nil {
		if err := extra(iso.ExtraArgs); err != nil {
			return badRequest("isolation.extra_args: %v", err)
		}
	}
	return nil
}

func describeChange(field string) string { return fmt.Sprintf("%s is writable by admins only", field) }

func nullableOf[T any](v T) nullable.Nullable[T] { return nullable.NewNullableWithValue(v) }
