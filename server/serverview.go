package server

import (
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/isolation"
	"github.com/mcpgate/mcpgate/store"
)

// maskPrefix starts every masked secret.
const maskPrefix = "••••"

// mask hides a secret, keeping its last two characters when it is long
// enough that they give nothing away.
func mask(v string) string {
	if len(v) < 8 {
		return maskPrefix
	}
	return maskPrefix + v[len(v)-2:]
}

// maskURL hides the password of a URL's credentials.
func maskURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if pw, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), mask(pw))
		s := u.String()
		// url.String escapes the mask's bullets; show them as typed.
		return strings.Replace(s, url.PathEscape(mask(pw)), mask(pw), 1)
	}
	return raw
}

func maskMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = mask(v)
	}
	return out
}

type isolationView struct {
	Enabled         bool           `json:"enabled"`
	EnabledOverride *bool          `json:"enabled_override"`
	ModeOverride    *string        `json:"mode_override"`
	Image           *string        `json:"image"`
	NetworkMode     *string        `json:"network_mode"`
	MemoryLimit     *string        `json:"memory_limit"`
	CPULimit        *float64       `json:"cpu_limit"`
	ExtraArgs       map[string]any `json:"extra_args"`
}

type statusView struct {
	State          string     `json:"state"`
	LastError      string     `json:"last_error"`
	ToolCount      int        `json:"tool_count"`
	ConnectedSince *time.Time `json:"connected_since"`
}

type ownerView struct {
	ID    int64  `json:"id"`
	Email string `json:"email"`
}

type serverView struct {
	Name               string              `json:"name"`
	Protocol           string              `json:"protocol"`
	Command            string              `json:"command"`
	Args               []string            `json:"args"`
	Env                map[string]string   `json:"env"`
	URL                string              `json:"url"`
	Headers            map[string]string   `json:"headers"`
	WorkingDir         string              `json:"working_dir"`
	Enabled            bool                `json:"enabled"`
	Quarantined        bool                `json:"quarantined"`
	Shared             bool                `json:"shared"`
	Owner              ownerView           `json:"owner"`
	Isolation          isolationView       `json:"isolation"`
	IsolationEffective isolation.Effective `json:"isolation_effective"`
	Status             statusView          `json:"status"`
	OAuth              oauthConfigView     `json:"oauth"`
	CreatedAt          time.Time           `json:"created_at"`
	UpdatedAt          time.Time           `json:"updated_at"`
}

func resolveIsolation(srv store.Server, globalMode string, host isolation.Host) isolation.Effective {
	return isolation.Resolve(isolation.Server{
		Protocol: srv.Protocol, Command: srv.Command,
		EnabledOverride: srv.Isolation.EnabledOverride, ModeOverride: srv.Isolation.ModeOverride,
	}, globalMode, host)
}

// viewServer is the only way a server leaves the process: secrets masked.
func viewServer(srv store.Server, eff isolation.Effective, st statusView) serverView {
	iso := srv.Isolation
	switch {
	case !srv.Enabled:
		st = statusView{State: "disabled"}
	case srv.Quarantined:
		st.State = "quarantined"
	}
	return serverView{
		Name: srv.Name, Protocol: srv.Protocol, Command: srv.Command, Args: srv.Args,
		Env: maskMap(srv.Env), URL: maskURL(srv.URL), Headers: maskMap(srv.Headers), WorkingDir: srv.WorkingDir,
		Enabled: srv.Enabled, Quarantined: srv.Quarantined, Shared: srv.Shared,
		Owner: ownerView{srv.OwnerID, srv.OwnerEmail},
		Isolation: isolationView{
			Enabled: eff.Isolated, EnabledOverride: iso.EnabledOverride, ModeOverride: iso.ModeOverride,
			Image: iso.Image, NetworkMode: iso.NetworkMode, MemoryLimit: iso.MemoryLimit, CPULimit: iso.CPULimit,
			ExtraArgs: iso.ExtraArgs,
		},
		IsolationEffective: eff,
		Status:             st,
		CreatedAt:          srv.CreatedAt,
		UpdatedAt:          srv.UpdatedAt,
	}
}

// toolView is a tool as REST shows it: in a server's list, or a search hit.
type toolView struct {
	Name         string               `json:"name"` // server:tool
	Server       string               `json:"server"`
	Tool         string               `json:"tool"`
	Title        string               `json:"title,omitempty"`
	Description  string               `json:"description"`
	Annotations  *mcp.ToolAnnotations `json:"annotations,omitempty"`
	InputSchema  any                  `json:"input_schema,omitempty"`
	OutputSchema any                  `json:"output_schema,omitempty"`
	Variant      string               `json:"variant,omitempty"`
	State        string               `json:"state,omitempty"`
	Pin          string               `json:"pin,omitempty"`
	Score        float64              `json:"score,omitempty"`
}
