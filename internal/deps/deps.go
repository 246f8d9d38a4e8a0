// Package deps pins the project's chosen dependencies while the packages
// that use them are being written. Delete it once every import is real.
package deps

import (
	_ "github.com/containerd/errdefs"
	_ "github.com/docker/docker/api/types/container"
	_ "github.com/docker/docker/api/types/filters"
	_ "github.com/docker/docker/api/types/image"
	_ "github.com/docker/docker/api/types/network"
	_ "github.com/docker/docker/client"
	_ "github.com/docker/docker/pkg/stdcopy"
	_ "github.com/elastic/go-seccomp-bpf"
	_ "github.com/getkin/kin-openapi/openapi3"
	_ "github.com/getkin/kin-openapi/openapi3filter"
	_ "github.com/getkin/kin-openapi/routers/gorillamux"
	_ "github.com/go-chi/chi/v5"
	_ "github.com/go-chi/chi/v5/middleware"
	_ "github.com/golang-jwt/jwt/v5"
	_ "github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/landlock-lsm/go-landlock/landlock"
	_ "github.com/modelcontextprotocol/go-sdk/auth"
	_ "github.com/modelcontextprotocol/go-sdk/mcp"
	_ "github.com/modelcontextprotocol/go-sdk/oauthex"
	_ "github.com/oapi-codegen/nullable"
	_ "golang.org/x/oauth2"
	_ "golang.org/x/sys/unix"
)
