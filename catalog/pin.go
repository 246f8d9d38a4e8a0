package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// pinVersion starts the hashed bytes, so that a future change of the
// canonical form cannot collide with pins approved under this one.
const pinVersion = "mcpgate-tool-pin/v1\n"

// canonicalTool is the pinned part of a tool. Fields marshal in declaration
// order and schemas are plain JSON values, whose object keys encoding/json
// writes sorted, so neither key order nor whitespace nor number spelling
// ("1.0" vs "1") of the upstream's JSON changes a pin.
type canonicalTool struct {
	Name         string               `json:"name"`
	Title        string               `json:"title"`
	Description  string               `json:"description"`
	InputSchema  any                  `json:"inputSchema"`
	OutputSchema any                  `json:"outputSchema"`
	Annotations  canonicalAnnotations `json:"annotations"`
}

// canonicalAnnotations spells every hint out with its MCP default filled
// in: an absent annotations object, an absent hint and a hint explicitly set
// to its default all pin the same, since they mean the same to a client.
// The SDK's typed struct already cannot tell "readOnlyHint": false from an
// absent one, so only this reading is consistent.
type canonicalAnnotations struct {
	ReadOnlyHint    bool   `json:"readOnlyHint"`    // default false
	DestructiveHint bool   `json:"destructiveHint"` // default true
	IdempotentHint  bool   `json:"idempotentHint"`  // default false
	OpenWorldHint   bool   `json:"openWorldHint"`   // default true
	Title           string `json:"title"`
}

// Pin returns the hex SHA-256 of tool's canonical form: its name, title,
// description, input and output schemas and annotations (with defaults made
// explicit). Icons and _meta are not pinned: clients do not show them to a
// model. Pin returns "" for a tool whose schemas cannot be encoded as JSON,
// which no tool received over MCP can be; "" matches no approved pin.
func Pin(tool *mcp.Tool) string {
	p, err := pinOf(tool)
	if err != nil {
		return ""
	}
	return p
}

func pinOf(tool *mcp.Tool) (string, error) {
	in, err := plainJSON(tool.InputSchema)
	if err != nil {
		return "", err
	}
	out, err := plainJSON(tool.OutputSchema)
	if err != nil {
		return "", err
	}
	return pinPlain(tool, in, out)
}

// pinPlain pins tool with its schemas already decoded into plain JSON values.
func pinPlain(tool *mcp.Tool, in, out any) (string, error) {
	ct := canonicalTool{
		Name:         tool.Name,
		Title:        tool.Title,
		Description:  tool.Description,
		InputSchema:  in,
		OutputSchema: out,
		Annotations:  canonicalAnnotations{DestructiveHint: true, OpenWorldHint: true},
	}
	if a := tool.Annotations; a != nil {
		ct.Annotations = canonicalAnnotations{
			ReadOnlyHint:    a.ReadOnlyHint,
			DestructiveHint: a.DestructiveHint == nil || *a.DestructiveHint,
			IdempotentHint:  a.IdempotentHint,
			OpenWorldHint:   a.OpenWorldHint == nil || *a.OpenWorldHint,
			Title:           a.Title,
		}
	}
	b, err := json.Marshal(ct)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(pinVersion))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)), nil
}
