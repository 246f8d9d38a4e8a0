package docker

import (
	"path"
	"strings"
)

// Runtime keys of the default image map.
const (
	RuntimePython    = "python"     // python, python3, uv, uvx, pip, pipx
	RuntimePythonGit = "python-git" // a Python runner installing from a git+ URL
	RuntimeNode      = "node"       // node, npm, npx, yarn, pnpm
	RuntimeGo        = "go"
	RuntimeRust      = "rust" // cargo, rustc
	RuntimeRuby      = "ruby" // ruby, gem, bundle
	RuntimePHP       = "php"  // php, composer
	RuntimeShell     = "shell"
)

// builtinImages are fully qualified so that a registry rewrite only has to
// swap the first path element.
var builtinImages = map[string]string{
	RuntimePython: "ghcr.io/astral-sh/uv:python3.12-bookworm-slim",
	// The non-slim Debian variant carries git, which uv needs for git+ URLs.
	RuntimePythonGit: "ghcr.io/astral-sh/uv:python3.12-bookworm",
	RuntimeNode:      "docker.io/library/node:22-bookworm-slim",
	RuntimeGo:        "docker.io/library/golang:1.26-bookworm",
	RuntimeRust:      "docker.io/library/rust:1-slim-bookworm",
	RuntimeRuby:      "docker.io/library/ruby:3.4-slim-bookworm",
	RuntimePHP:       "docker.io/library/composer:2",
	RuntimeShell:     "docker.io/library/alpine:3.22",
}

// DefaultImages returns a copy of the built-in runtime → image map.
func DefaultImages() map[string]string {
	m := make(map[string]string, len(builtinImages))
	for k, v := range builtinImages {
		m[k] = v
	}
	return m
}

// ImagePolicy is the operator's say over image choice.
type ImagePolicy struct {
	// Registry replaces the registry host of the built-in images, for a
	// mirror or an offline registry: "registry.example.com/mirror" turns
	// "docker.io/library/node:22" into "registry.example.com/mirror/library/node:22".
	// It does not touch images the operator or the server named.
	Registry string
	// Images merge over the built-in map key by key. A key is a runtime
	// (RuntimeNode…) or a command basename ("npx"); a basename key wins
	// over its runtime key.
	Images map[string]string
}

// Runtime returns the runtime key for a command and its args: the command's
// basename picks the runtime, and a git+ URL among a Python runner's args
// picks RuntimePythonGit. Unknown commands run in RuntimeShell.
func Runtime(command string, args []string) string {
	base := path.Base(command)
	switch {
	case isPython(base):
		for _, a := range args {
			if hasGitURL(a) {
				return RuntimePythonGit
			}
		}
		return RuntimePython
	case base == "node", base == "npm", base == "npx", base == "yarn", base == "pnpm", base == "corepack":
		return RuntimeNode
	case base == "go":
		return RuntimeGo
	case base == "cargo", base == "rustc":
		return RuntimeRust
	case base == "ruby", base == "gem", base == "bundle", base == "bundler":
		return RuntimeRuby
	case base == "php", base == "composer":
		return RuntimePHP
	}
	return RuntimeShell
}

func isPython(base string) bool {
	switch base {
	case "uv", "uvx", "pip", "pip3", "pipx", "python", "python3":
		return true
	}
	// python3.12, pip3.11 …
	for _, p := range []string{"python3.", "pip3."} {
		if rest, ok := strings.CutPrefix(base, p); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
			return true
		}
	}
	return false
}

// hasGitURL reports whether an argument names a git+ source: the whole arg
// ("git+https://…"), an option value ("--from=git+…") or a PEP 508 direct
// reference ("pkg @ git+…").
func hasGitURL(arg string) bool {
	for i := 0; ; {
		j := strings.Index(arg[i:], "git+")
		if j < 0 {
			return false
		}
		at := i + j
		if at == 0 || strings.ContainsRune(" =@", rune(arg[at-1])) {
			return true
		}
		i = at + len("git+")
	}
}

// ChooseImage picks the image for a stdio server: the server's own image
// (isolation.image) when set, else the operator's map, else the built-in
// map rewritten to the operator's registry. It is a pure function.
func ChooseImage(serverImage, command string, args []string, p ImagePolicy) string {
	if serverImage != "" {
		return serverImage
	}
	rt := Runtime(command, args)
	if rt != RuntimePythonGit { // a git+ URL must not fall back to a git-less basename image
		if img := p.Images[path.Base(command)]; img != "" {
			return img
		}
	}
	if img := p.Images[rt]; img != "" {
		return img
	}
	img := builtinImages[rt]
	if p.Registry != "" {
		img = rewriteRegistry(img, p.Registry)
	}
	return img
}

func rewriteRegistry(ref, registry string) string {
	registry = strings.TrimSuffix(registry, "/")
	_, rest, ok := strings.Cut(ref, "/")
	if !ok {
		return registry + "/" + ref
	}
	return registry + "/" + rest
}
