package catalog

import (
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Variant is the class of a tool call, and the name of the call_tool_*
// tool that makes it. It doubles as the token scope that permits it.
type Variant string

// The variants, in increasing order of what they may do.
const (
	VariantRead        Variant = "read"
	VariantWrite       Variant = "write"
	VariantDestructive Variant = "destructive"
)

// Variants lists every variant, least powerful first.
var Variants = []Variant{VariantRead, VariantWrite, VariantDestructive}

// level orders variants and scopes; 0 is unknown.
func (v Variant) level() int {
	switch v {
	case VariantRead:
		return 1
	case VariantWrite:
		return 2
	case VariantDestructive:
		return 3
	}
	return 0
}

// Valid reports whether v is one of the three variants.
func (v Variant) Valid() bool { return v.level() > 0 }

// ToolName returns the gateway tool that calls with this variant, such as
// "call_tool_write".
func (v Variant) ToolName() string { return "call_tool_" + string(v) }

// Sentinel errors of CheckCall, wrapped in a *GateError.
var (
	ErrWrongVariant      = errors.New("wrong call variant for this tool")
	ErrInsufficientScope = errors.New("token scope does not cover this call")
	ErrUnknownVariant    = errors.New("unknown call variant")
)

// GateError says why CheckCall refused a call. Its message is written for
// the MCP client (and the model behind it): it names the variant or scope
// that would be accepted.
type GateError struct {
	Used     Variant // the variant the caller used
	Required Variant // the tool's class
	err      error   // one of the sentinels
}

func (e *GateError) Error() string {
	switch e.err {
	case ErrWrongVariant:
		return fmt.Sprintf("this tool is classed %s by its annotations: call it with %s, not %s",
			e.Required, e.Required.ToolName(), e.Used.ToolName())
	case ErrInsufficientScope:
		return fmt.Sprintf("this tool is classed %s by its annotations and needs a token with the %q scope; this token's scopes do not include it",
			e.Required, e.Required)
	}
	return fmt.Sprintf("unknown call variant %q: use %s, %s or %s",
		e.Used, VariantRead.ToolName(), VariantWrite.ToolName(), VariantDestructive.ToolName())
}

func (e *GateError) Unwrap() error { return e.err }

// RequiredVariant returns the class of a tool with annotations ann, by the
// MCP defaults: only readOnlyHint: true makes a tool read-only, and a
// non-read-only tool is destructive unless it says destructiveHint: false.
// nil annotations are all defaults: destructive.
func RequiredVariant(ann *mcp.ToolAnnotations) Variant {
	switch {
	case ann == nil:
		return VariantDestructive
	case ann.ReadOnlyHint:
		return VariantRead
	case ann.DestructiveHint != nil && !*ann.DestructiveHint:
		return VariantWrite
	}
	return VariantDestructive
}

// Covers reports whether scopes permit calls of variant v. Scopes are
// cumulative: "destructive" covers write and read calls, "write" covers
// read calls. Unknown scope strings grant nothing.
func Covers(scopes []string, v Variant) bool {
	if !v.Valid() {
		return false
	}
	best := 0
	for _, s := range scopes {
		best = max(best, Variant(s).level())
	}
	return best >= v.level()
}

// CheckCall decides whether a call made with variant used to a tool with
// annotations ann, by a token with scopes, may go ahead. The variant must
// equal the tool's class exactly (a read-only tool called through
// call_tool_write is refused too, so that a client's choice of variant is
// always a truthful statement of what the call may do), and the scopes must
// cover the tool's class; a missing scope is reported before a wrong
// variant. The returned error is a *GateError.
func CheckCall(used Variant, ann *mcp.ToolAnnotations, scopes []string) error {
	if !used.Valid() {
		return &GateError{Used: used, err: ErrUnknownVariant}
	}
	need := RequiredVariant(ann)
	// Scope first: telling a read-only token to switch variant would only
	// lead to a second refusal.
	if !Covers(scopes, need) {
		return &GateError{Used: used, Required: need, err: ErrInsufficientScope}
	}
	if used != need {
		return &GateError{Used: used, Required: need, err: ErrWrongVariant}
	}
	return nil
}
