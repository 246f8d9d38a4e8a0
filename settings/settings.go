// Package settings defines the gateway's runtime settings, kept in the
// database and changed through PATCH /api/v1/config: their defaults, and how
// a merge patch applies to them.
package settings

import (
	"encoding/json"
	"fmt"
	"maps"
)

// Key is the settings row that holds the whole document.
const Key = "config"

// Config is the runtime settings document.
type Config struct {
	Isolation Isolation `json:"isolation"`
	Docker    Docker    `json:"docker"`
	Upstreams Upstreams `json:"upstreams"`
	Activity  Activity  `json:"activity"`
}

// Isolation holds the global isolation settings.
type Isolation struct {
	GlobalMode  string `json:"global_mode"`
	NetworkMode string `json:"network_mode"`
	FailClosed  bool   `json:"fail_closed"`
}

// Docker holds the container runner's settings.
type Docker struct {
	Registry      string            `json:"registry"`
	DefaultImages map[string]string `json:"default_images"`
	AllowPull     bool              `json:"allow_pull"`
}

// Upstreams holds limits for upstream sessions.
type Upstreams struct {
	CallTimeoutSeconds   int `json:"call_timeout_seconds"`
	InitTimeoutSeconds   int `json:"init_timeout_seconds"`
	IdleTimeoutSeconds   int `json:"idle_timeout_seconds"`
	MaxPersonalInstances int `json:"max_personal_instances"`
}

// Activity holds audit-log settings.
type Activity struct {
	RetentionDays  int  `json:"retention_days"`
	StoreArguments bool `json:"store_arguments"`
}

// Defaults returns the settings a fresh gateway starts with; globalMode is
// what the host offers (isolation.DefaultGlobal).
func Defaults(globalMode string) Config {
	return Config{
		Isolation: Isolation{GlobalMode: globalMode, NetworkMode: "none"},
		Docker:    Docker{DefaultImages: map[string]string{}},
		Upstreams: Upstreams{CallTimeoutSeconds: 120, InitTimeoutSeconds: 60, IdleTimeoutSeconds: 600, MaxPersonalInstances: 5},
		Activity:  Activity{RetentionDays: 90},
	}
}

// Apply merges an RFC 7396 patch into cur. A null member resets that
// setting to its default (a null section resets the section); default_images
// merges key by key. Unknown keys are an error naming them.
func Apply(cur Config, defaults Config, patch []byte) (Config, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(patch, &top); err != nil {
		return cur, fmt.Errorf("body is not a JSON object")
	}
	curDoc, defDoc := toMap(cur), toMap(defaults)
	for section, raw := range top {
		if _, ok := defDoc[section]; !ok {
			return cur, fmt.Errorf("unknown setting %q", section)
		}
		if isNull(raw) {
			curDoc[section] = defDoc[section]
			continue
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil {
			return cur, fmt.Errorf("%s must be an object", section)
		}
		cs, ds := curDoc[section].(map[string]any), defDoc[section].(map[string]any)
		for k, v := range fields {
			if _, ok := ds[k]; !ok {
				return cur, fmt.Errorf("unknown setting %s.%s", section, k)
			}
			switch {
			case isNull(v):
				cs[k] = ds[k]
			case section == "docker" && k == "default_images":
				var m map[string]*string
				if err := json.Unmarshal(v, &m); err != nil {
					return cur, fmt.Errorf("docker.default_images must map runtimes to images")
				}
				imgs, _ := cs[k].(map[string]any)
				imgs = maps.Clone(imgs)
				if imgs == nil {
					imgs = map[string]any{}
				}
				for rt, img := range m {
					if img == nil {
						delete(imgs, rt)
					} else {
						imgs[rt] = *img
					}
				}
				cs[k] = imgs
			default:
				var val any
				if err := json.Unmarshal(v, &val); err != nil {
					return cur, err
				}
				cs[k] = val
			}
		}
	}
	b, err := json.Marshal(curDoc)
	if err != nil {
		return cur, err
	}
	var out Config
	if err := json.Unmarshal(b, &out); err != nil {
		return cur, fmt.Errorf("invalid value: %v", err)
	}
	return out, nil
}

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

func toMap(c Config) map[string]any {
	b, _ := json.Marshal(c)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}
