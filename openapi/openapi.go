// Package openapi embeds the REST contract and validates requests (and, in
// tests, responses) against it.
package openapi

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// Spec is the document as served at /api/v1/openapi.yaml.
//
//go:embed openapi.yaml
var Spec []byte

func init() {
	// Merge patches are JSON; the validator must read them as such.
	openapi3filter.RegisterBodyDecoder("application/merge-patch+json", openapi3filter.JSONBodyDecoder)
}

// Validator checks HTTP exchanges against the document.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
}

// Load parses and checks the embedded document.
func Load() (*Validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(Spec)
	if err != nil {
		return nil, fmt.Errorf("loading openapi.yaml: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("validating openapi.yaml: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &Validator{doc: doc, router: router}, nil
}

// Doc returns the parsed document.
func (v *Validator) Doc() *openapi3.T { return v.doc }

// ErrNoRoute means the request matches no operation of the document.
type ErrNoRoute struct{ Method, Path string }

func (e *ErrNoRoute) Error() string { return fmt.Sprintf("no route %s %s", e.Method, e.Path) }

// ErrMethod means the path exists, but not with that method.
type ErrMethod struct{ Method, Path string }

func (e *ErrMethod) Error() string {
	return fmt.Sprintf("method %s not allowed on %s", e.Method, e.Path)
}

// ValidateRequest checks r (path, query, headers, body) and restores its
// body for the handler. Authentication is not its business: the server's
// middleware has done it.
func (v *Validator) ValidateRequest(r *http.Request) (*routers.Route, map[string]string, error) {
	route, params, err := v.router.FindRoute(r)
	if err != nil {
		switch err {
		case routers.ErrMethodNotAllowed:
			return nil, nil, &ErrMethod{r.Method, r.URL.Path}
		default:
			return nil, nil, &ErrNoRoute{r.Method, r.URL.Path}
		}
	}
	in := &openapi3filter.RequestValidationInput{
		Request: r, PathParams: params, Route: route,
		Options: &openapi3filter.Options{
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
			// Defaults are the handler's business; the body stays as sent.
			SkipSettingDefaults: true,
			// A 400 names the field and the rule, never dumps the schema.
			SchemaValidationOptions: []openapi3.SchemaValidationOption{openapi3.DisableSchemaErrorDetails()},
		},
	}
	if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
		return route, params, err
	}
	return route, params, nil
}

// ValidateResponse checks a recorded response against the operation that
// req matched; tests call it on every response they see.
func (v *Validator) ValidateResponse(ctx context.Context, req *http.Request, status int, header http.Header, body []byte) error {
	route, params, err := v.router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
		Status: status,
		Header: header,
		Body:   io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            false,
		},
	}
	if err := openapi3filter.ValidateResponse(ctx, in); err != nil {
		return fmt.Errorf("%s %s → %d: %w", req.Method, req.URL.Path, status, err)
	}
	return nil
}

// Describe turns a validation error into a short, public sentence: the
// field and the rule it broke, without the schema.
func Describe(err error) string {
	switch e := err.(type) {
	case *openapi3filter.RequestError:
		var where string
		if e.Parameter != nil {
			where = fmt.Sprintf("%s parameter %q", e.Parameter.In, e.Parameter.Name)
		} else if e.RequestBody != nil {
			where = "request body"
		}
		if se, ok := e.Err.(*openapi3.SchemaError); ok {
			path := strings.Join(se.JSONPointer(), ".")
			reason := se.Reason
			if reason == "" {
				reason = "does not match the schema (" + se.SchemaField + ")"
			}
			if path != "" {
				return fmt.Sprintf("%s: %s: %s", where, path, reason)
			}
			return fmt.Sprintf("%s: %s", where, reason)
		}
		if e.Err != nil {
			msg := e.Err.Error()
			if where != "" {
				return where + ": " + msg
			}
			return msg
		}
		if e.Reason != "" {
			return strings.TrimSpace(where + " " + e.Reason)
		}
	case *openapi3filter.SecurityRequirementsError:
		return "authentication required"
	}
	return "request does not match the API description"
}
